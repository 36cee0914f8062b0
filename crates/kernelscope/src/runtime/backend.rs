//! The backend contract: what the CPU backend, the CUDA backend and the
//! no-CUDA stub each implement, checked by the compiler. Users hold the
//! closed [`Device`](super::Device) enum; it forwards every call through
//! one `match` to this trait, so adding a method here makes every backend
//! (the stub included) say how it does it.

use std::sync::Arc;

use super::DType;
use super::command::Command;
use super::cpu::kernel_args::CpuKernelFn;
use super::kernel::LoadedKernel;
use super::memory::{DeviceMemory, MemoryInfo};
use crate::error::Result;
use crate::profile::{DispatchTiming, Profiler, TimingMethod};

/// What a device can measure and how it runs work, for `kscope info`, the
/// profile's conditions and the engine's execution policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Capabilities {
    /// How submissions are timed.
    pub submission_timing: TimingMethod,
    /// Whether and how dispatches are timed.
    pub dispatch_timing: DispatchTiming,
    /// Whether dispatches inside graph replays are timed too.
    pub dispatch_timing_in_graphs: bool,
    /// Whether NVTX ranges are emitted (CUDA; `None` where NVTX does not apply).
    pub nvtx: Option<bool>,
    /// Whether a replayed [`Graph`](super::Graph) is one device-side launch
    /// (CUDA graphs), which removes the host's per-dispatch cost; where it is
    /// not (the CPU), a replay runs the recorded dispatches one by one and
    /// gains nothing over encoding them again.
    pub graph_launch: bool,
    /// Whether [`Device::buffer_from_mapped`](super::Device::buffer_from_mapped)
    /// uses a mapped file's bytes in place (the CPU) rather than copying them
    /// into the device's memory, so loading weights needs no free device memory.
    pub maps_files_in_place: bool,
    /// Whether graph replays launch kernels early, each starting while its
    /// predecessor finishes (CUDA's programmatic dependent launch); a kernel
    /// launched early is timed from its predecessor's end.
    pub early_launch_in_graphs: bool,
    /// Whether kernels can copy global memory into shared memory by bulk
    /// asynchronous copies counted by a barrier (CUDA's `cp.async.bulk`,
    /// compute capability 9.0 and later): the streamed quantized products.
    pub bulk_copies: bool,
    /// Whether ops run several of decode's steps in one persistent launch
    /// where they have such a kernel (CUDA, where
    /// [`DeviceOptions::persistent_steps`](super::DeviceOptions::persistent_steps)
    /// asks for it).
    pub persistent_kernels: bool,
    /// The GPU's streaming multiprocessors, where the device has them
    /// (persistent kernels size their grid by it).
    pub multiprocessors: Option<u32>,
    /// The most shared memory one block may take, where the device has
    /// shared memory (every kernel may ask for it all).
    pub shared_memory_per_block: Option<u32>,
}

/// The implementations registered for one kernel name, one per backend at
/// most; each backend takes the one it runs.
#[derive(Default, Clone)]
pub(crate) struct KernelSources {
    pub cpu: Option<CpuKernelFn>,
    pub cuda_source: Option<Arc<str>>,
    /// A library call CUDA runs in place of `cuda_source`.
    pub cuda_library: Option<super::LibraryCall>,
}

/// What every backend provides.
pub(crate) trait Backend {
    /// `cpu` or `cuda`.
    fn kind(&self) -> &'static str;
    /// The device's name.
    fn name(&self) -> &str;
    /// A number no other live device shares (the address of its shared
    /// state): handles and allocations of one device compare equal by it.
    fn identity(&self) -> usize;
    /// The device's profiling session.
    fn profiler(&self) -> &Profiler;
    /// What the device can time and how it runs work.
    fn capabilities(&self) -> Capabilities;
    /// Blocks of `kernel` of `threads` threads and `shared_bytes` of dynamic
    /// shared memory one multiprocessor runs at once; `None` where the
    /// backend has no multiprocessors (the CPU) or the kernel is not ours.
    fn resident_blocks(
        &self,
        _kernel: &super::Kernel,
        _threads: u32,
        _shared_bytes: u32,
    ) -> Result<Option<u32>> {
        Ok(None)
    }
    /// The driver's version, where there is a driver.
    fn driver_version(&self) -> Option<String>;
    /// Free and total memory, where the device can tell.
    fn memory_info(&self) -> Option<MemoryInfo>;
    /// The physical limits the device reports (none for the CPU, which
    /// does not say its memory's clock).
    fn physical_limits(&self) -> super::PhysicalLimits {
        super::PhysicalLimits::default()
    }
    /// A zero-filled allocation for `shape` elements of `dtype` (the byte
    /// size is already checked not to overflow).
    fn alloc(&self, dtype: DType, shape: &[usize]) -> Result<Arc<dyn DeviceMemory>>;
    /// A zero-filled allocation the device writes and the host reads in
    /// place, without a copy (pinned host memory mapped for a GPU); the
    /// CPU's own memory already is one.
    fn alloc_host_mapped(&self, dtype: DType, shape: &[usize]) -> Result<Arc<dyn DeviceMemory>> {
        self.alloc(dtype, shape)
    }
    /// An allocation holding `byte_len` bytes of `map` at `byte_offset`
    /// (in place where the device can read host memory, else a copy).
    fn map_file(
        &self,
        map: Arc<memmap2::Mmap>,
        byte_offset: usize,
        byte_len: usize,
    ) -> Result<Arc<dyn DeviceMemory>>;
    /// Kernel `name` made ready from the implementation this backend runs;
    /// `KernelMissing` naming the workaround where there is none.
    fn load_kernel(&self, name: &str, sources: &KernelSources) -> Result<LoadedKernel>;
    /// Runs (or enqueues) `commands` as one submission labeled `label`.
    fn execute(&self, commands: &[Command], label: &Arc<str>) -> Result<()>;
    /// Waits for everything committed so far.
    fn wait(&self) -> Result<()>;
}
