//! Why the CUDA backend cannot be used, and the shapes CUDA and NCCL
//! failures take as the sources of [`super::Error`]'s variants.

use std::fmt;

/// Why the CUDA backend cannot be used (what
/// [`Error::BackendUnavailable`](super::Error::BackendUnavailable) carries as its source).
#[derive(Clone, Debug, thiserror::Error)]
pub enum CudaUnavailable {
    /// The crate was built without the `cuda` feature.
    #[error("this build has no CUDA support")]
    NotBuilt,
    /// No driver library could be loaded.
    #[error("no CUDA driver library (libcuda.so) on this machine")]
    NoDriver,
    /// The driver loaded but counts no GPU.
    #[error("the CUDA driver sees no GPU")]
    NoGpu,
    /// The GPU asked for is not there.
    #[error("there are only {count} GPU(s) (cuda:0..cuda:{})", .count.saturating_sub(1))]
    NoSuchGpu {
        /// How many GPUs the driver sees.
        count: usize,
    },
    /// NVRTC, which compiles the kernels, could not be loaded.
    #[error("NVRTC (libnvrtc.so) is not on the loader path, so kernels cannot be compiled")]
    NoNvrtc,
    /// The driver loaded but could not be initialised.
    #[cfg(feature = "cuda")]
    #[error("the CUDA driver failed to initialise: {0}")]
    DriverFailed(#[source] cudarc::driver::DriverError),
}

/// `cuda:N: ` when a GPU was named.
pub(super) struct OnDevice(pub(super) Option<usize>);

impl fmt::Display for OnDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(ordinal) => write!(f, "cuda:{ordinal}: "),
            None => Ok(()),
        }
    }
}

/// NCCL's status of a failed call. cudarc's `NcclError` is neither
/// `Display` nor `std::error::Error`, so it is wrapped to be a source.
#[cfg(feature = "cuda")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NcclFailure(pub cudarc::nccl::result::NcclError);

#[cfg(feature = "cuda")]
impl fmt::Display for NcclFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.0.0;
        write!(f, "NCCL status {status:?} ({})", status as u32)
    }
}

#[cfg(feature = "cuda")]
impl std::error::Error for NcclFailure {}
