//! The CUDA device handle: opening a GPU in named steps (context and
//! stream, what the GPU is, how dispatches will be timed, the clocks, the
//! gate) and the methods the neutral runtime calls on it. cudarc's
//! per-buffer event tracking is off (it would record events around every
//! launch); the submission timings are resolved whenever the host waits.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, sys};

use super::clock::{CuptiClock, Epoch};
use super::cupti::StreamKey;
use super::driver::{driver_error, driver_present, driver_version};
use super::gate::Gate;
use super::memory::CudaMemory;
use super::modules::CudaKernel;
use super::state::{DeviceParts, DeviceState};
use super::stream::DeviceStream;
use super::timing::Timings;
use crate::error::{CudaUnavailable, Error, Remedy, Result};
use crate::profile::{DispatchTiming, ProfileLevel, Profiler, TimingMechanism, TimingMethod};
use crate::runtime::backend::{Backend, Capabilities, KernelSources};
use crate::runtime::collective::group::GroupBackend;
use crate::runtime::command::Command;
use crate::runtime::kernel::LoadedKernel;
use crate::runtime::memory::{DeviceMemory, MemoryInfo};
use crate::runtime::{DType, DeviceOptions};

/// How CUDA dispatches are timed without CUPTI: eager launches only.
fn event_dispatch_timing(note: &str) -> DispatchTiming {
    DispatchTiming::Supported {
        method: TimingMethod::current(TimingMechanism::CudaEvents).with_note(note),
    }
}

/// A CUDA device handle (cheap to clone).
#[derive(Clone)]
pub struct CudaDevice {
    state: Arc<DeviceState>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaDevice({})", self.state.name())
    }
}

/// Why GPU `ordinal` (or, without one, any GPU) cannot be used; the CPU
/// can always be opened instead.
fn unavailable(ordinal: Option<usize>, source: CudaUnavailable) -> Error {
    Error::BackendUnavailable {
        backend: "cuda",
        ordinal,
        source,
        remedies: &[Remedy::OtherDevice { device: "cpu" }],
    }
}

/// Refuses an ordinal no GPU answers to, naming the ones there are.
fn check_ordinal(ordinal: usize) -> Result<()> {
    let count = CudaDevice::probe().map_err(|reason| unavailable(Some(ordinal), reason))?;
    if ordinal >= count {
        return Err(unavailable(Some(ordinal), CudaUnavailable::NoSuchGpu { count }));
    }
    Ok(())
}

/// The GPU's context, with cudarc's event tracking off, and our stream.
/// The context (the GPU's primary one) is opened once per process and kept,
/// as its modules are (`ModuleCache::of_gpu`): released when the last
/// device of a GPU dropped, it was made again by the next, whose modules
/// could then be loaded where the old ones were, and CUPTI named a new
/// kernel by the unloaded one that had had its handle (tests opening one
/// device after another saw `stream_read` reported for `stream_write`).
fn open_stream(ordinal: usize) -> Result<(Arc<CudaContext>, Arc<CudaStream>)> {
    static CONTEXTS: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<usize, Arc<CudaContext>>>,
    > = std::sync::OnceLock::new();
    let context = {
        let mut contexts = crate::sync::lock(CONTEXTS.get_or_init(Default::default));
        match contexts.get(&ordinal) {
            Some(context) => context.clone(),
            None => {
                let context = CudaContext::new(ordinal).map_err(driver_error("creating a context"))?;
                // SAFETY: our buffers are raw allocations ordered by our
                // one stream; nothing relies on cudarc's per-buffer events.
                unsafe { context.disable_event_tracking() };
                contexts.insert(ordinal, context.clone());
                context
            }
        }
    };
    let stream = context.new_stream().map_err(driver_error("creating a stream"))?;
    Ok((context, stream))
}

/// The GPU's name and the architecture kernels are compiled for.
fn describe_gpu(context: &CudaContext) -> Result<(String, &'static str)> {
    let gpu = context.name().map_err(driver_error("reading the device name"))?;
    let (major, minor) = context
        .compute_capability()
        .map_err(driver_error("reading the compute capability"))?;
    // Leaked once per opened device: kernels and cache keys borrow it.
    let arch: &'static str = Box::leak(format!("sm_{major}{minor}").into_boxed_str());
    Ok((gpu, arch))
}

/// The limits `context`'s GPU reports; a figure whose attributes cannot be
/// read is absent rather than an error (it is shown, never relied on).
fn physical_limits(context: &CudaContext) -> crate::runtime::PhysicalLimits {
    use crate::runtime::limits::{memory_bandwidth_gbps, tensor_flops_per_sm_per_clock};
    use sys::CUdevice_attribute as Attribute;
    let read = |attribute| context.attribute(attribute).ok().map(|value| value.max(0) as u64);
    let memory_bandwidth = read(Attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)
        .zip(read(Attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH))
        .filter(|&(clock, width)| clock > 0 && width > 0)
        .map(|(clock_khz, width)| {
            (
                memory_bandwidth_gbps(clock_khz, width),
                format!(
                    "memory clock {:.0} MHz × 2 transfers × {width}-bit bus, from the device's attributes",
                    clock_khz as f64 / 1e3
                ),
            )
        });
    let tensor_compute = context.compute_capability().ok().and_then(|(major, minor)| {
        let per_clock = tensor_flops_per_sm_per_clock(major, minor)?;
        let sms = read(Attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).filter(|&sms| sms > 0)?;
        let clock_khz = read(Attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE).filter(|&khz| khz > 0)?;
        Some((
            (sms * per_clock) as f64 * clock_khz as f64 * 1e3 / 1e9,
            format!(
                "{sms} SMs × {:.0} MHz × {per_clock} dense 16-bit tensor-core FLOP per SM per clock (sm_{major}{minor}), from the device's attributes",
                clock_khz as f64 / 1e3
            ),
        ))
    });
    crate::runtime::PhysicalLimits {
        memory_bandwidth,
        tensor_compute,
    }
}

/// A device attribute that is a positive count, `None` where the driver
/// does not say (the capabilities show it absent rather than fail).
fn positive_attribute(context: &CudaContext, attribute: sys::CUdevice_attribute) -> Option<u32> {
    let value = context.attribute(attribute).ok()?;
    u32::try_from(value).ok().filter(|&value| value > 0)
}

/// The major compute capability of `arch` (`sm_90` -> 9), 0 if unreadable.
fn arch_major(arch: &str) -> u32 {
    let digits = arch.trim_start_matches("sm_");
    digits[..digits.len().saturating_sub(1)].parse().unwrap_or(0)
}

/// Whether the GPU has programmatic dependent launch (compute capability
/// 9.0 and later).
fn supports_early_launch(context: &CudaContext) -> Result<bool> {
    let (major, _) = context
        .compute_capability()
        .map_err(driver_error("reading the compute capability"))?;
    Ok(major >= 9)
}

/// How dispatches will be timed and, when by CUPTI, CUPTI's ids of the
/// stream. CUPTI costs something on every launch: only dispatch-level
/// profiling turns it on; other levels say what that level would use.
fn choose_dispatch_timing(
    options: &DeviceOptions,
    context: &CudaContext,
    stream: &CudaStream,
) -> (DispatchTiming, Option<StreamKey>) {
    if let Some(reason) = &options.dispatch_timing_unsupported {
        return (
            DispatchTiming::Unsupported {
                reason: reason.clone(),
            },
            None,
        );
    }
    if options.profile_level() == ProfileLevel::Dispatch {
        let key = super::cupti::start()
            .and_then(|()| super::cupti::stream_key(context.cu_ctx(), stream.cu_stream()));
        return match key {
            Ok(key) => (DispatchTiming::supported(TimingMechanism::Cupti), Some(key)),
            Err(reason) => (
                event_dispatch_timing(&format!("around eager launches; CUPTI unavailable: {reason}")),
                None,
            ),
        };
    }
    // SAFETY: only tries to load the library by its known names.
    let timing = if unsafe { cudarc::cupti::sys::is_culib_present() } {
        DispatchTiming::supported(TimingMechanism::Cupti)
    } else {
        event_dispatch_timing("around eager launches")
    };
    (timing, None)
}

/// The gate, when CUPTI times dispatches: only CUPTI slows the enqueue
/// enough to leave the device idle inside a submission; without it the gate
/// would be a needless stream wait. A gate that cannot be made is a warning.
fn open_gate(uses_cupti: bool, stream: &DeviceStream, profiler: &Profiler) -> Option<Gate> {
    if !uses_cupti {
        return None;
    }
    match Gate::new(stream.context()) {
        Ok(gate) => Some(gate),
        Err(reason) => {
            profiler.warn_once(
                "cuda-gate",
                &format!(
                    "kernelscope: submissions cannot be held until fully enqueued ({reason}); with CUPTI on, their times include the host's enqueue"
                ),
            );
            None
        }
    }
}

/// Lets readers of the profile take CUPTI's records not handed over yet.
fn connect_late_records(state: &Arc<DeviceState>) {
    // Weak: the profiler lives inside the state.
    let weak = Arc::downgrade(state);
    state.profiler().set_late_records(Box::new(move || {
        if let Some(state) = weak.upgrade() {
            state.deliver(true);
        }
    }));
}

impl CudaDevice {
    /// The GPU's ordinal (`cuda:N`): two handles opened on one GPU share it.
    pub fn ordinal(&self) -> usize {
        self.state.stream().context().ordinal()
    }

    /// How many GPUs there are, or why none can be used.
    pub(crate) fn count() -> Result<usize> {
        Self::probe().map_err(|reason| unavailable(None, reason))
    }

    fn probe() -> std::result::Result<usize, CudaUnavailable> {
        if !driver_present() {
            return Err(CudaUnavailable::NoDriver);
        }
        match CudaContext::device_count() {
            Ok(count) if count > 0 => Ok(count as usize),
            Ok(_) => Err(CudaUnavailable::NoGpu),
            Err(error) => Err(CudaUnavailable::DriverFailed(error)),
        }
    }

    pub(crate) fn open(ordinal: usize, options: &DeviceOptions) -> Result<CudaDevice> {
        check_ordinal(ordinal)?;
        let (context, stream) = open_stream(ordinal)?;
        let (gpu, arch) = describe_gpu(&context)?;
        let early_launch = !options.serial_launch && supports_early_launch(&context)?;
        use sys::CUdevice_attribute as Attribute;
        let multiprocessors =
            positive_attribute(&context, Attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
        let shared_memory_per_block = positive_attribute(
            &context,
            Attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        );
        let driver = driver_version();
        let (dispatch_timing, cupti_key) = choose_dispatch_timing(options, &context, &stream);
        let profiler = Profiler::new(options.profile_level(), options.token_selection, dispatch_timing);
        let cupti = cupti_key.map(|key| CuptiClock::calibrate(&profiler, key));
        let stream = DeviceStream::new(context, stream);
        let epoch = Epoch::measure(&stream, &profiler)?;
        let gate = open_gate(cupti.is_some(), &stream, &profiler);
        let state = Arc::new(DeviceState::new(DeviceParts {
            name: format!("cuda:{ordinal} {gpu} ({arch})"),
            profiler,
            arch,
            early_launch,
            persistent_kernels: options.persistent_steps,
            multiprocessors,
            shared_memory_per_block,
            check_finite: options.check_finite,
            driver,
            modules: super::modules::ModuleCache::of_gpu(ordinal),
            timings: Timings::new(epoch, cupti),
            gate,
            stream,
        }));
        connect_late_records(&state);
        state.start_records()?;
        Ok(CudaDevice { state })
    }
}

/// Collectives between `devices` through NCCL, rank `i` on `devices[i]`.
pub(crate) fn open_collectives(devices: &[&CudaDevice]) -> Result<Arc<dyn GroupBackend>> {
    super::nccl::NcclGroup::open(devices.iter().map(|device| device.state.clone()).collect())
}

/// NCCL's version, or the error saying where it was looked for.
pub(crate) fn nccl_library() -> Result<String> {
    super::nccl::NcclGroup::loaded_version()
}

/// A new NCCL unique id, for rank 0 of a group of processes to share.
pub(crate) fn nccl_unique_id() -> Result<Vec<u8>> {
    super::nccl::NcclGroup::unique_id()
}

/// `device`'s communicator as rank `rank` of `ranks` processes, from rank
/// 0's unique id `id`.
pub(crate) fn join_collectives(
    device: &CudaDevice,
    id: &[u8],
    rank: usize,
    ranks: usize,
) -> Result<Arc<dyn GroupBackend>> {
    super::nccl::NcclGroup::open_rank(device.state.clone(), id, rank, ranks)
}

impl Backend for CudaDevice {
    fn kind(&self) -> &'static str {
        "cuda"
    }

    fn name(&self) -> &str {
        self.state.name()
    }

    fn identity(&self) -> usize {
        Arc::as_ptr(&self.state) as usize
    }

    fn profiler(&self) -> &Profiler {
        self.state.profiler()
    }

    fn resident_blocks(
        &self,
        kernel: &crate::runtime::Kernel,
        threads: u32,
        shared_bytes: u32,
    ) -> Result<Option<u32>> {
        super::modules::resident_blocks(kernel, threads, shared_bytes)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            submission_timing: TimingMethod::current(TimingMechanism::CudaEvents),
            dispatch_timing: self.state.profiler().dispatch_timing().clone(),
            dispatch_timing_in_graphs: self.state.uses_cupti(),
            nvtx: Some(super::nvtx::active()),
            graph_launch: true,
            maps_files_in_place: false,
            early_launch_in_graphs: self.state.early_launch(),
            bulk_copies: arch_major(self.state.arch()) >= 9,
            persistent_kernels: self.state.persistent_kernels(),
            multiprocessors: self.state.multiprocessors(),
            shared_memory_per_block: self.state.shared_memory_per_block(),
        }
    }

    fn driver_version(&self) -> Option<String> {
        Some(self.state.driver().to_string())
    }

    fn physical_limits(&self) -> crate::runtime::PhysicalLimits {
        physical_limits(self.state.stream().context())
    }

    fn memory_info(&self) -> Option<MemoryInfo> {
        let (free, total) = self.state.stream().context().mem_get_info().ok()?;
        Some(MemoryInfo {
            free: free as u64,
            total: total as u64,
        })
    }

    fn alloc(&self, dtype: DType, shape: &[usize]) -> Result<Arc<dyn DeviceMemory>> {
        let byte_len = shape.iter().product::<usize>() * dtype.size_in_bytes();
        Ok(Arc::new(CudaMemory::zeroed(self.state.clone(), byte_len)?))
    }

    fn alloc_host_mapped(&self, dtype: DType, shape: &[usize]) -> Result<Arc<dyn DeviceMemory>> {
        let byte_len = shape.iter().product::<usize>() * dtype.size_in_bytes();
        Ok(Arc::new(CudaMemory::host_mapped(self.state.clone(), byte_len)?))
    }

    /// Copies the mapped bytes into device memory.
    fn map_file(
        &self,
        map: Arc<memmap2::Mmap>,
        byte_offset: usize,
        byte_len: usize,
    ) -> Result<Arc<dyn DeviceMemory>> {
        let memory = CudaMemory::zeroed(self.state.clone(), byte_len)?;
        let end = byte_offset + byte_len;
        let bytes = map.get(byte_offset..end).ok_or_else(|| Error::OutOfBounds {
            context: "upload of a mapped tensor".into(),
            start: byte_offset,
            end,
            available: map.len(),
        })?;
        memory.write_bytes(0, bytes)?;
        Ok(Arc::new(memory))
    }

    fn load_kernel(&self, name: &str, sources: &KernelSources) -> Result<LoadedKernel> {
        self.state.bind()?;
        if let Some(call) = sources.cuda_library {
            // Opened now, so a missing library is an error before any work.
            self.state.blas().map_err(|error| match error {
                Error::KernelMissing { .. } => super::blas::unavailable(name),
                other => other,
            })?;
            return Ok(Arc::new(CudaKernel::Library(call)));
        }
        let source = sources
            .cuda_source
            .as_deref()
            .ok_or_else(|| Error::KernelMissing {
                name: name.to_string(),
                backend: "cuda",
                workaround: "no source was registered with KernelRegistry::register_cuda_source".into(),
                remedies: &[Remedy::OtherDevice { device: "cpu" }],
            })?;
        let kernel: CudaKernel = self.state.modules().kernel(
            self.state.stream().context(),
            self.state.arch(),
            name,
            source,
            self.state.early_launch(),
        )?;
        Ok(Arc::new(kernel))
    }

    fn execute(&self, commands: &[Command], label: &Arc<str>) -> Result<()> {
        super::execute::execute(&self.state, commands, label)
    }

    fn wait(&self) -> Result<()> {
        self.state.synchronize()
    }
}
