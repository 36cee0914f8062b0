//! The GPU's module cache: each kernel source is compiled (or read from
//! the disk cache, see `compile.rs`) and loaded once per GPU for the
//! process (every device of the GPU shares the cache and the context, see
//! `device.rs`), keyed like the disk cache, and every kernel of it is looked
//! up in the loaded module. Modules are never unloaded, so a kernel handle
//! always names one kernel, which CUPTI's records rely on.
//! Also what a loaded kernel is to this backend ([`CudaKernel`]), including a
//! collective as a trait object ([`RankCollective`]): launches and graphs
//! call it without knowing NCCL, which sits above them (it opens from device
//! states and hands out kernels).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};

use super::compile;
use super::driver::driver_error;
use crate::error::{Error, Result};
use crate::runtime::LibraryCall;
use crate::runtime::command::RecordedDispatch;

/// A kernel ready on one CUDA device: compiled from our source, or a call
/// into a library that launches kernels of its own.
#[derive(Clone)]
pub(crate) enum CudaKernel {
    /// Our kernel, loaded from its module.
    Compiled {
        function: CudaFunction,
        /// Whether a graph may launch it before its predecessor finishes:
        /// the device has programmatic dependent launch on and the kernel's
        /// source begins by waiting (`runtime::early_launch`).
        early_launch: bool,
    },
    /// A library call (see `blas.rs`).
    Library(LibraryCall),
    /// A collective of one rank of a group (NCCL's, see `nccl.rs`).
    Collective(Arc<dyn RankCollective>),
}

/// One rank's collective of one kind and element type, as launches and
/// graph replays use it.
pub(crate) trait RankCollective: Send + Sync {
    /// Launches it with the dispatch's buffers on the rank's stream
    /// (context bound by the caller).
    fn launch(&self, recorded: &RecordedDispatch) -> Result<()>;

    /// The communicator it runs on, as (group, rank): the collectives of one
    /// rank share it, and a graph holds it once however many it captured.
    fn communicator(&self) -> (usize, usize);

    /// How many times the group's communicators were made again; a graph
    /// records it when it captures the collective.
    fn generation(&self) -> u64;

    /// Holds the rank's communicator alive (not aborted, not remade) until
    /// the returned value is dropped, for a graph launch: an error instead
    /// when the group was aborted, or remade since the graph captured it at
    /// generation `captured`.
    fn hold_for_replay(&self, captured: u64) -> Result<Box<dyn CommunicatorHold + '_>>;
}

/// Keeps a communicator alive while it exists (see
/// [`RankCollective::hold_for_replay`]).
pub(crate) trait CommunicatorHold {}

/// Loaded modules by source key (and architecture, in the key).
#[derive(Default)]
pub(crate) struct ModuleCache {
    modules: Mutex<HashMap<u64, Arc<CudaModule>>>,
}

impl ModuleCache {
    /// The cache of GPU `ordinal`, made on first use and kept for the
    /// process.
    pub(crate) fn of_gpu(ordinal: usize) -> Arc<ModuleCache> {
        static CACHES: std::sync::OnceLock<Mutex<HashMap<usize, Arc<ModuleCache>>>> =
            std::sync::OnceLock::new();
        crate::sync::lock(CACHES.get_or_init(Default::default))
            .entry(ordinal)
            .or_default()
            .clone()
    }

    /// The kernel `name` of `source`, compiled for `arch` and loaded into
    /// `context` (bound by the caller) on first use; launched early in
    /// graphs where `early_launch` and its source allow.
    pub(crate) fn kernel(
        &self,
        context: &Arc<CudaContext>,
        arch: &'static str,
        name: &str,
        source: &str,
        early_launch: bool,
    ) -> Result<CudaKernel> {
        let key = compile::source_key(source, arch);
        let module = {
            let mut modules = crate::sync::lock(&self.modules);
            match modules.get(&key) {
                Some(module) => module.clone(),
                None => {
                    let module = load(context, arch, name, source, key)?;
                    modules.insert(key, module.clone());
                    module
                }
            }
        };
        let function = module.load_function(name).map_err(|error| Error::KernelMissing {
            name: name.to_string(),
            backend: "cuda",
            workaround: format!("its CUDA source defines no `extern \"C\" __global__ {name}` ({error})"),
            remedies: &[],
        })?;
        allow_all_shared_memory(context, &function, name)?;
        Ok(CudaKernel::Compiled {
            function,
            early_launch: early_launch && crate::runtime::early_launch::begins_by_waiting(source, name),
        })
    }
}

/// Blocks of `kernel` of `threads` threads and `shared_bytes` of dynamic
/// shared memory one multiprocessor runs at once, by the driver's count
/// (registers and static shared memory included); `None` for a kernel
/// that is not ours (a library call, a collective).
pub(crate) fn resident_blocks(
    kernel: &crate::runtime::Kernel,
    threads: u32,
    shared_bytes: u32,
) -> Result<Option<u32>> {
    let Some(CudaKernel::Compiled { function, .. }) = kernel.loaded::<CudaKernel>() else {
        return Ok(None);
    };
    function
        .occupancy_max_active_blocks_per_multiprocessor(threads, shared_bytes as usize, None)
        .map(Some)
        .map_err(driver_error("counting the blocks a multiprocessor holds"))
}

/// Lets `function` take as much dynamic shared memory as a block may have
/// on this GPU (past the 48 KiB every kernel gets without asking): the
/// streamed products size their rings of rows by it. A limit, not a
/// reservation: a launch still takes only what it asks for.
fn allow_all_shared_memory(context: &Arc<CudaContext>, function: &CudaFunction, name: &str) -> Result<()> {
    use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
    let most = context
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .map_err(driver_error("reading the shared memory a block may take"))?;
    let fixed = function
        .get_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
        .map_err(driver_error("reading a kernel's static shared memory"))?;
    function
        .set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            (most - fixed).max(0),
        )
        .map_err(|source| Error::Cuda {
            operation: format!(
                "letting `{name}` take {} bytes of dynamic shared memory",
                most - fixed
            ),
            source,
        })
}

/// Loads the module of `source`, from the disk cache when the driver takes it.
fn load(
    context: &Arc<CudaContext>,
    arch: &'static str,
    name: &str,
    source: &str,
    key: u64,
) -> Result<Arc<CudaModule>> {
    let ptx = compile::compile(name, source, arch, key, true)?;
    match context.load_module(ptx) {
        Ok(module) => Ok(module),
        // A cached file the driver rejects (damaged, or from another
        // driver): compile afresh, which rewrites it.
        Err(_) => {
            let ptx = compile::compile(name, source, arch, key, false)?;
            context.load_module(ptx).map_err(driver_error("loading a module"))
        }
    }
}
