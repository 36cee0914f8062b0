//! The CUDA backend's place in the API. The `Device::Cuda` variant exists in
//! every build so that code and tests are written once against `&Device`;
//! until the backend lands, a CUDA device cannot be created and asking for
//! one is an error that names the workaround.

use std::convert::Infallible;
use std::fmt;

use crate::error::{Error, Result};

/// A CUDA device handle. No value of it can exist yet: every constructor
/// returns an error, so methods on it are unreachable.
#[derive(Clone)]
pub struct CudaDevice {
    never: Infallible,
}

impl fmt::Debug for CudaDevice {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.never {}
    }
}

impl CudaDevice {
    /// Opens GPU `ordinal`.
    pub(crate) fn open(ordinal: usize) -> Result<CudaDevice> {
        Err(Error::BackendUnavailable {
            backend: "cuda",
            reason: unavailable_reason(ordinal),
        })
    }

    /// Proof that no CUDA device exists, for exhaustive matches.
    pub(crate) fn unreachable(&self) -> ! {
        match self.never {}
    }

    /// Whether a CUDA device could be opened on this machine, and why not.
    pub fn probe() -> std::result::Result<usize, String> {
        Err(unavailable_reason(0))
    }
}

#[cfg(feature = "cuda")]
fn unavailable_reason(ordinal: usize) -> String {
    // SAFETY: only tries to load the driver library by its known names; it
    // runs no code of the library beyond its initialisers.
    let present = unsafe { cudarc::driver::sys::is_culib_present() };
    let driver = if present {
        "the CUDA driver library is present"
    } else {
        "no CUDA driver library (libcuda) was found"
    };
    format!(
        "cuda:{ordinal}: the CUDA backend is not implemented in this version ({driver}); use --device cpu"
    )
}

#[cfg(not(feature = "cuda"))]
fn unavailable_reason(ordinal: usize) -> String {
    format!(
        "cuda:{ordinal}: this build has no CUDA support; rebuild with `--features cuda`, or use --device cpu"
    )
}
