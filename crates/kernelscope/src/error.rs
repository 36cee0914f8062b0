//! The crate's one error type. Variants are structured so callers (the CLI,
//! tests) can match on what went wrong and print a one-line message that
//! names the culprit and, where there is one, the workaround.

use std::path::PathBuf;

use crate::runtime::DType;

/// Everything that can go wrong in kernelscope's library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A backend was asked for but cannot be used here.
    #[error("{backend} backend unavailable: {reason}")]
    BackendUnavailable {
        /// The backend's name (`cuda`).
        backend: &'static str,
        /// Why, and what to do instead.
        reason: String,
    },

    /// A device specification (`cpu`, `cuda:1`, ...) could not be parsed.
    #[error("invalid device `{spec}`: {problem}")]
    InvalidDevice {
        /// What the user wrote.
        spec: String,
        /// What is wrong with it.
        problem: String,
    },

    /// A buffer whose byte size does not fit in memory's address space.
    #[error(
        "a {dtype} buffer of shape {shape:?} cannot be allocated (larger than memory or the address space)"
    )]
    AllocationTooLarge {
        /// The element type.
        dtype: DType,
        /// The shape asked for.
        shape: Vec<usize>,
    },

    /// A kernel has no implementation for the backend it was asked on.
    /// Never answered by a silent fallback to another backend.
    #[error("kernel `{name}` has no {backend} implementation; {workaround}")]
    KernelMissing {
        /// The kernel's registered name.
        name: String,
        /// The backend that lacks it.
        backend: &'static str,
        /// What the user can do instead (another device or dtype).
        workaround: String,
    },

    /// A kernel's argument does not fit what the kernel asked of it.
    #[error("kernel `{kernel}` argument {index}: {problem}")]
    KernelArgument {
        /// The kernel's name.
        kernel: String,
        /// Position of the argument in the dispatch.
        index: usize,
        /// What is wrong.
        problem: String,
    },

    /// A kernel reported a failure while running.
    #[error("kernel `{kernel}` failed: {message}")]
    KernelFailed {
        /// The kernel's name.
        kernel: String,
        /// The kernel's own message.
        message: String,
    },

    /// A dispatch writes memory that another of its own arguments also covers.
    #[error(
        "dispatch of `{kernel}` writes argument {written} while argument {other} overlaps the same bytes; bind it once as read_write instead"
    )]
    Aliasing {
        /// The kernel's name.
        kernel: String,
        /// The written argument.
        written: usize,
        /// The overlapping argument.
        other: usize,
    },

    /// Element type differs from what the operation expects.
    #[error("{context}: expected dtype {expected}, found {found}")]
    DTypeMismatch {
        /// Where the mismatch was found.
        context: String,
        /// The dtype the operation needs.
        expected: DType,
        /// The dtype it got.
        found: DType,
    },

    /// Shape or length differs from what the operation expects.
    #[error("{context}: expected shape {expected:?}, found {found:?}")]
    ShapeMismatch {
        /// Where the mismatch was found.
        context: String,
        /// The shape the operation needs.
        expected: Vec<usize>,
        /// The shape it got.
        found: Vec<usize>,
    },

    /// A view or copy reaches outside its buffer.
    #[error("{context}: range {start}..{end} is outside 0..{available}")]
    OutOfBounds {
        /// Where it happened.
        context: String,
        /// First element (or byte) asked for.
        start: usize,
        /// One past the last element (or byte) asked for.
        end: usize,
        /// How many there are.
        available: usize,
    },

    /// Something tried to write read-only memory.
    #[error("{context}: the memory is read-only")]
    ReadOnly {
        /// What was being written.
        context: String,
    },

    /// A buffer was used with a device it does not belong to.
    #[error("{context}: buffer belongs to device {buffer_device}, not to {device}")]
    DeviceMismatch {
        /// Where it happened.
        context: String,
        /// The buffer's device.
        buffer_device: String,
        /// The device it was used on.
        device: String,
    },

    /// An encoder method was called in a state where it makes no sense.
    #[error("command encoder: {0}")]
    EncoderState(String),

    /// A profiling level name was not one of off, submission, dispatch.
    #[error("invalid profiling level `{0}`: expected off, submission or dispatch")]
    InvalidProfileLevel(String),

    /// A profile file could not be read or is not a kernelscope profile.
    #[error("{path}: {problem}")]
    ProfileFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },

    /// Two profiles were taken under different conditions.
    #[error("profiles were taken under different conditions ({differences}); pass --force to compare anyway")]
    ConditionsDiffer {
        /// Each differing condition as `name: base vs new`.
        differences: String,
    },

    /// A CUDA driver call failed. The driver's error is kept (not flattened
    /// into text) so callers can tell its kind; see [`Error::is_out_of_memory`].
    #[cfg(feature = "cuda")]
    #[error("CUDA {operation}: {source}")]
    Cuda {
        /// What was being done.
        operation: String,
        /// The driver's error.
        #[source]
        source: cudarc::driver::DriverError,
    },

    /// cuBLASLt refused or failed a call (its status is kept).
    #[cfg(feature = "cuda")]
    #[error("cuBLASLt {operation}: {source:?}")]
    Blas {
        /// What was being done.
        operation: String,
        /// The library's status.
        source: cudarc::cublaslt::result::CublasError,
    },

    /// NVRTC could not compile a kernel's source; its log is in the source.
    #[cfg(feature = "cuda")]
    #[error("CUDA compiling `{kernel}` with NVRTC: {source}")]
    CudaCompile {
        /// The kernel of interest in the source.
        kernel: String,
        /// NVRTC's error, with its log.
        #[source]
        source: cudarc::nvrtc::CompileError,
    },

    /// A device allocation failed for want of free device memory (the driver
    /// answered `CUDA_ERROR_OUT_OF_MEMORY`). In every build, so callers can
    /// match it without naming the `cuda` feature.
    #[error("CUDA {operation}: out of device memory ({requested_bytes} bytes asked for)")]
    DeviceOutOfMemory {
        /// What was being done.
        operation: String,
        /// The size of the allocation that was refused.
        requested_bytes: usize,
    },

    /// A collective (all-reduce, all-gather) could not run: the ranks
    /// asked for different collectives or sizes, the group could not be
    /// formed, or the library failed.
    #[error("{collective} on rank {rank}: {problem}")]
    Collective {
        /// The collective (`all_reduce_sum`, `all_gather`, or `group` for
        /// forming one).
        collective: String,
        /// The rank that saw the failure.
        rank: usize,
        /// What went wrong.
        problem: String,
    },

    /// A collective was abandoned because its group was aborted (another
    /// rank failed first; its error is the one to report).
    #[error("collective on rank {rank} abandoned: {reason}")]
    CollectiveAborted {
        /// The rank whose collective was abandoned.
        rank: usize,
        /// Why the group was aborted.
        reason: String,
    },

    /// An operating-system I/O error.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl Error {
    /// Whether the device ran out of memory: an allocation refused for want
    /// of device memory, or any other CUDA driver call that answered
    /// `CUDA_ERROR_OUT_OF_MEMORY` (loading a module, instantiating a graph).
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            Error::DeviceOutOfMemory { .. } => true,
            #[cfg(feature = "cuda")]
            Error::Cuda { source, .. } => source.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            _ => false,
        }
    }
}

/// Why no CUDA device can be used at all (what
/// [`CudaDevice::probe`](crate::runtime::CudaDevice::probe) answers).
#[derive(Clone, Debug, thiserror::Error)]
pub enum CudaUnavailable {
    /// The crate was built without the `cuda` feature.
    #[error(
        "cuda:{ordinal}: this build has no CUDA support; rebuild with `--features cuda`, or use --device cpu"
    )]
    NotBuilt {
        /// The GPU that was asked for.
        ordinal: usize,
    },
    /// No driver library could be loaded.
    #[error("no CUDA driver library (libcuda.so) on this machine")]
    NoDriver,
    /// The driver loaded but counts no GPU.
    #[error("the CUDA driver sees no GPU")]
    NoGpu,
    /// The driver loaded but could not be initialised.
    #[cfg(feature = "cuda")]
    #[error("the CUDA driver failed to initialise: {0}")]
    DriverFailed(#[source] cudarc::driver::DriverError),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
