//! What a collective is, the arguments its dispatch carries, and what a
//! group's backend (the in-process exchange, NCCL) provides, apart from the
//! communicator that holds a device: the backends import this, not the
//! handle above them.

use crate::error::Result;
use crate::runtime::DType;
use crate::runtime::arguments::kernel_arguments;
use crate::runtime::kernel::LoadedKernel;

/// A collective operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Collective {
    /// Every rank's buffer becomes the element-wise sum over the ranks (in
    /// place). Its arguments are `all_reduce`'s: the buffer, read and written.
    AllReduceSum,
    /// Every rank's output becomes the ranks' inputs one after another, in
    /// rank order. Its arguments are `all_gather`'s: the input (read), the
    /// output (written, ranks times the input's length).
    AllGather,
}

/// An all-reduce dispatch's arguments: the one list the backends read and
/// the op builds its dispatch by.
pub(crate) mod all_reduce {
    super::kernel_arguments! { BUFFER: "buffer" ReadWrite }
}

/// An all-gather dispatch's arguments (see [`all_reduce`]).
pub(crate) mod all_gather {
    super::kernel_arguments! { INPUT: "input" Read, OUTPUT: "output" Write }
}

impl Collective {
    /// The kernel name its dispatches carry (`all_reduce_sum_f32`).
    pub fn kernel_name(self, dtype: DType) -> String {
        match self {
            Collective::AllReduceSum => format!("all_reduce_sum_{dtype}"),
            Collective::AllGather => format!("all_gather_{dtype}"),
        }
    }

    /// `all_reduce_sum` or `all_gather`.
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduceSum => "all_reduce_sum",
            Collective::AllGather => "all_gather",
        }
    }
}

/// What a group's backend does: the in-process exchange, or NCCL.
pub(crate) trait GroupBackend: Send + Sync {
    /// The library and its version (`NCCL 2.27.5`, `in-process`).
    fn library(&self) -> String;
    /// How the ranks are linked, where the library can tell.
    fn link(&self) -> String;
    /// Fails every pending and later collective of the group.
    fn abort(&self, reason: &str);
    /// Why the group was aborted, if it was (and not rebuilt since).
    fn aborted(&self) -> Option<String>;
    /// Makes an aborted group usable again (new NCCL communicators; a
    /// cleared exchange); nothing when it is not aborted. Every rank must be
    /// out of its collectives: the caller has joined them.
    fn rebuild(&self) -> Result<()>;
    /// The backend's kernel for `collective` on elements of `dtype` at `rank`.
    fn kernel(&self, rank: usize, collective: Collective, dtype: DType) -> Result<LoadedKernel>;
}
