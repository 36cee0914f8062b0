//! The crate's one error type. Variants are structured so callers (the CLI,
//! tests) can match on what went wrong and print a one-line message that
//! names the culprit and, where there is one, the workaround. A library
//! knows no command line: where the way out is to change what was asked for
//! (another device or dtype, a rebuild, forcing a comparison), the error
//! carries it as a [`Remedy`] in the library's terms, and a front end such
//! as `kscope` names its own flag for it.

use std::path::PathBuf;

use crate::runtime::DType;

mod cuda;
mod remedy;

pub use cuda::CudaUnavailable;
#[cfg(feature = "cuda")]
pub use cuda::NcclFailure;
use cuda::OnDevice;
use remedy::Suffix;
pub use remedy::{Remedies, Remedy};

/// Everything that can go wrong in kernelscope's library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A backend was asked for but cannot be used here.
    #[error("{backend} backend unavailable: {}{source}{}", OnDevice(*.ordinal), Suffix(.remedies))]
    BackendUnavailable {
        /// The backend's name (`cuda`).
        backend: &'static str,
        /// The GPU asked for, when one was.
        ordinal: Option<usize>,
        /// Why (the driver's own error where it failed).
        #[source]
        source: CudaUnavailable,
        /// What to ask for instead.
        remedies: &'static [Remedy],
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
    #[error("kernel `{name}` has no {backend} implementation; {workaround}{}", Suffix(.remedies))]
    KernelMissing {
        /// The kernel's registered name.
        name: String,
        /// The backend that lacks it.
        backend: &'static str,
        /// Why, and what the library's user can do about it (register one,
        /// install a library).
        workaround: String,
        /// What to ask for instead (another device or dtype).
        remedies: &'static [Remedy],
    },

    /// CPU kernels were asked for in an instruction set this CPU lacks.
    #[error("the {path} CPU kernels need instructions this CPU lacks (it runs: {available})")]
    CpuKernelsUnsupported {
        /// The path asked for (`AVX-512 BF16`).
        path: &'static str,
        /// The paths this CPU runs, comma-separated.
        available: String,
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

    /// A dispatch wrote NaN or +infinity (`DeviceOptions::check_finite`):
    /// the first place a run's numbers stopped being numbers.
    #[error(
        "the first non-finite output: kernel `{kernel}` in {scope} wrote {count} non-finite values of {len} to argument {argument} (the first, at {index}, is {value})"
    )]
    NonFiniteOutput {
        /// The kernel.
        kernel: String,
        /// Where in the model it ran (`layer.3.attn`), or `(unscoped)`.
        scope: String,
        /// The buffer argument's position.
        argument: usize,
        /// How many of its values are not finite.
        count: usize,
        /// How many values it has.
        len: usize,
        /// The first non-finite value's position.
        index: usize,
        /// That value.
        value: f32,
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

    /// A selection of tokens to profile could not be read.
    #[error("invalid token selection `{text}`: {problem}")]
    InvalidTokenSelection {
        /// The text given.
        text: String,
        /// What is wrong with it.
        problem: String,
    },

    /// A profile file could not be read or is not a kernelscope profile.
    #[error("{path}: {problem}")]
    ProfileFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },

    /// `kscope profile` could not make a profile of the program's records.
    #[error("no profile of the program: {problem}")]
    ProgramProfile {
        /// Why not.
        problem: String,
    },

    /// A profile to compare holds no time at all (no token, submission or
    /// dispatch that took any): any comparison with it would read as "no
    /// regression".
    #[error(
        "the {side} profile holds no timed work ({tokens} tokens, {submissions} submissions, {dispatches} dispatches, every one of 0 ns): nothing to compare"
    )]
    NothingTimed {
        /// `base` or `new`.
        side: &'static str,
        /// Its tokens.
        tokens: usize,
        /// Its submissions.
        submissions: usize,
        /// Its dispatches.
        dispatches: usize,
    },

    /// Two profiles were taken under different conditions; comparing them
    /// anyway is [`Remedy::Force`].
    #[error("profiles were taken under different conditions ({differences}){}", Suffix(&[Remedy::Force]))]
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
    /// asked for different collectives or sizes, or the group could not be
    /// formed (NCCL's own failures are `Error::Nccl`, a `cuda` build's).
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

    /// An NCCL call failed (its status is kept).
    #[cfg(feature = "cuda")]
    #[error("{collective} on rank {rank}: {operation}: {source}")]
    Nccl {
        /// The collective (`all_reduce_sum`, `all_gather`, or `group` for
        /// forming one).
        collective: String,
        /// The rank that saw the failure.
        rank: usize,
        /// The call and what it was for (`ncclCommInitAll over GPUs [0, 1]`).
        operation: String,
        /// NCCL's status.
        #[source]
        source: NcclFailure,
    },

    /// NCCL, which collectives between GPUs run through, could not be
    /// loaded; running on one device needs no collective
    /// ([`Remedy::OneDevice`]).
    #[error(
        "collectives between GPUs run through NCCL, which could not be loaded (tried {} on the loader path, LD_LIBRARY_PATH){}",
        .tried.join(", "),
        Suffix(&[Remedy::OneDevice])
    )]
    NcclNotFound {
        /// The library file names the loader was asked for, in order.
        tried: Vec<String>,
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

    /// A process started by a launcher (torchrun, mpirun, srun) cannot tell
    /// its place in the group from the environment.
    #[error("launcher environment: {variable}: {problem}")]
    LaunchEnvironment {
        /// The variable at fault (or the ones missing).
        variable: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The ranks of a group of processes could not meet.
    #[error("rendezvous at {address}, rank {rank} of {world_size}: {problem}")]
    Rendezvous {
        /// `host:port` of rank 0's listener.
        address: String,
        /// This process's rank.
        rank: usize,
        /// The group's size.
        world_size: usize,
        /// What went wrong (a rank that never arrived, a mismatched model).
        problem: String,
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
    /// What to ask for instead, in the library's terms (empty where the
    /// error is not answered by asking for something else).
    pub fn remedies(&self) -> &[Remedy] {
        match self {
            Error::BackendUnavailable { remedies, .. } | Error::KernelMissing { remedies, .. } => remedies,
            Error::ConditionsDiffer { .. } => &[Remedy::Force],
            Error::NcclNotFound { .. } => &[Remedy::OneDevice],
            _ => &[],
        }
    }

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

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remedies_are_fields_and_read_in_library_terms() {
        let missing = Error::KernelMissing {
            name: "matmul_u32".into(),
            backend: "cuda",
            workaround: "matmul has no u32 kernel on cuda".into(),
            remedies: &[Remedy::OtherDevice { device: "cpu" }, Remedy::OtherDtype],
        };
        assert_eq!(
            missing.to_string(),
            "kernel `matmul_u32` has no cuda implementation; matmul has no u32 kernel on cuda; \
             open device `cpu` instead, or use weights of another dtype"
        );
        let without = Error::KernelMissing {
            name: "x".into(),
            backend: "cpu",
            workaround: "none was registered".into(),
            remedies: &[],
        };
        assert!(without.to_string().ends_with("none was registered"), "{without}");
        let differ = Error::ConditionsDiffer {
            differences: "mode: eager vs graph".into(),
        };
        assert_eq!(differ.remedies(), [Remedy::Force]);
        assert!(differ.to_string().ends_with("; set `force` to compare anyway"));
        let nccl = Error::NcclNotFound {
            tried: vec!["libnccl.so".into(), "libnccl.so.2".into()],
        };
        assert_eq!(nccl.remedies(), [Remedy::OneDevice]);
        assert!(
            nccl.to_string()
                .contains("(tried libnccl.so, libnccl.so.2 on the loader path")
        );
        // No message names a command-line flag.
        for error in [missing, without, differ, nccl] {
            assert!(!error.to_string().contains("--"), "{error}");
        }
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn nccl_failures_keep_nccls_status() {
        use cudarc::nccl::{result::NcclError, sys::ncclResult_t};
        let error = Error::Nccl {
            collective: "all_reduce_sum".into(),
            rank: 1,
            operation: "ncclAllReduce".into(),
            source: NcclFailure(NcclError(ncclResult_t::ncclUnhandledCudaError)),
        };
        assert_eq!(
            error.to_string(),
            "all_reduce_sum on rank 1: ncclAllReduce: NCCL status ncclUnhandledCudaError (1)"
        );
        let source =
            std::error::Error::source(&error).and_then(|source| source.downcast_ref::<NcclFailure>());
        assert_eq!(
            source.map(|failure| failure.0.0),
            Some(ncclResult_t::ncclUnhandledCudaError)
        );
    }
}
