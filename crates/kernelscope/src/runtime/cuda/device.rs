//! The CUDA device: one context and one non-default stream per GPU (stream
//! capture is refused on the legacy default stream), cudarc's per-buffer
//! event tracking off (it would record events around every launch), kernels
//! compiled by NVRTC for the device's architecture and cached in memory and
//! on disk, and the submission timings resolved from event pairs whenever
//! the host waits.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};

use super::compile;
use super::cupti::KernelActivity;
use super::gate::Gate;
use super::memory::CudaMemory;
use crate::error::{CudaUnavailable, Error, Result};
use crate::profile::{DispatchMeta, DispatchTiming, Profiler, SubmissionRecord};
use crate::runtime::DType;
use crate::runtime::buffer::{Buffer, Memory};
use crate::runtime::device::{Capabilities, DeviceOptions};
use crate::runtime::encoder::Command;

/// How CUDA submissions are timed.
pub(crate) const SUBMISSION_TIMING_METHOD: &str = "cuda event pairs";
/// How CUDA dispatches are timed when CUPTI is in use.
/// The method names the gate because it changed what a replay's submission
/// time means (profiles made before it are not compared without --force).
pub(crate) const CUPTI_TIMING_METHOD: &str = "cupti activity records (eager launches and graph replays; replays timed from the end of the host's enqueue)";
/// How CUDA dispatches are timed without CUPTI (eager launches only).
pub(crate) const EVENT_TIMING_METHOD: &str = "cuda event pairs around eager launches";

/// Where a device's CUPTI records come from and how their clock maps to
/// the profiler's: `host_ns = cupti_ns + offset_ns`, an offset measured
/// when the device opened (not a ratio of clock rates).
pub(crate) struct CuptiClock {
    pub key: (u32, u32),
    pub offset_ns: i128,
}

impl CuptiClock {
    fn calibrate(profiler: &Profiler, key: (u32, u32)) -> CuptiClock {
        // The tightest of a few host/CUPTI/host brackets.
        let mut best = (u64::MAX, 0i128);
        for _ in 0..8 {
            let before = profiler.now_ns();
            let gpu = super::cupti::timestamp();
            let after = profiler.now_ns();
            if after - before < best.0 {
                best = (after - before, i128::from((before + after) / 2) - i128::from(gpu));
            }
        }
        CuptiClock {
            key,
            offset_ns: best.1,
        }
    }

    pub fn to_host(&self, cupti_ns: u64) -> u64 {
        (i128::from(cupti_ns) + self.offset_ns).max(0) as u64
    }
}

/// Turns a driver error into ours, naming the operation.
pub(crate) fn driver_error(operation: &str) -> impl FnOnce(cudarc::driver::DriverError) -> Error + '_ {
    move |source| Error::Cuda {
        operation: operation.to_string(),
        source,
    }
}

/// Like [`driver_error`] for a device allocation of `requested_bytes`: running
/// out of device memory is its own error, which callers can act on.
pub(crate) fn allocation_error(
    operation: &str,
    requested_bytes: usize,
) -> impl FnOnce(cudarc::driver::DriverError) -> Error + '_ {
    move |source| match source.0 {
        sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => Error::DeviceOutOfMemory {
            operation: operation.to_string(),
            requested_bytes,
        },
        _ => Error::Cuda {
            operation: operation.to_string(),
            source,
        },
    }
}

/// A CUDA event, destroyed on drop. Events are pooled by the device.
pub(crate) struct Event(pub sys::CUevent);

// SAFETY: a CUevent is a driver handle usable from any thread once the
// context is bound; the device serialises its use through its own locks.
unsafe impl Send for Event {}
// SAFETY: shared access only reads elapsed times of completed events, which
// the driver allows from any thread.
unsafe impl Sync for Event {}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: the event was created by `event::create` and is destroyed once.
        unsafe {
            let _ = cudarc::driver::result::event::destroy(self.0);
        }
    }
}

/// A dispatch whose times await the GPU: from an event pair around it
/// (eager, without CUPTI) or from its CUPTI record (`events` is `None`).
pub(crate) struct PendingDispatch {
    pub index: u32,
    pub meta: DispatchMeta,
    pub events: Option<(Event, Event)>,
}

/// A submission whose times await the events' completion.
pub(crate) struct PendingSubmission {
    pub label: Arc<str>,
    /// The token open when the work was committed.
    pub token: Option<u32>,
    pub submission: u64,
    pub dispatches: u32,
    /// Host time spent enqueueing it.
    pub host_enqueue_ns: u64,
    /// Whether the stream was held until the enqueue was done (see `gate.rs`).
    pub gated: bool,
    pub start: Event,
    pub end: Event,
    pub timed_dispatches: Vec<PendingDispatch>,
}

/// State shared by a CUDA device and its buffers. Fields drop in order, so
/// the handles made in the context (events, modules, the stream) go before
/// the context itself.
pub(crate) struct CudaShared {
    pub name: String,
    pub profiler: Profiler,
    pub arch: &'static str,
    pub driver: String,
    modules: Mutex<HashMap<u64, Arc<CudaModule>>>,
    pending: Mutex<Vec<PendingSubmission>>,
    awaiting: Mutex<Awaiting>,
    staging: Mutex<Vec<Staging>>,
    /// False once CUPTI's records failed to line up with the dispatches.
    cupti_lined_up: AtomicBool,
    spare_events: Mutex<Vec<Event>>,
    /// An event recorded once, and the host time (profiler clock) at which
    /// it completed: event times are placed on the host clock by this
    /// measured offset, not by any ratio.
    epoch: Event,
    epoch_host_ns: u64,
    /// Set when dispatches are timed by CUPTI.
    pub cupti: Option<CuptiClock>,
    /// Held across a submission's launches (and a graph's capture), so that
    /// threads sharing the device cannot interleave launches on the stream:
    /// event pairs, CUPTI's stream order and captures all rely on it.
    pub submitting: Mutex<()>,
    /// Holds the stream while a CUPTI-timed submission is enqueued.
    pub gate: Option<Gate>,
    pub stream: Arc<CudaStream>,
    pub context: Arc<CudaContext>,
}

impl CudaShared {
    pub(crate) fn bind(&self) -> Result<()> {
        self.context
            .bind_to_thread()
            .map_err(driver_error("binding the context"))
    }

    pub(crate) fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    /// An event with timing enabled, recorded on the stream.
    pub(crate) fn record_event(&self) -> Result<Event> {
        let event = match crate::sync::lock(&self.spare_events).pop() {
            Some(event) => event,
            None => Event(
                cudarc::driver::result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                    .map_err(driver_error("creating an event"))?,
            ),
        };
        // SAFETY: a valid event and the device's own stream.
        unsafe { cudarc::driver::result::event::record(event.0, self.cu_stream()) }
            .map_err(driver_error("recording an event"))?;
        Ok(event)
    }

    pub(crate) fn push_pending(&self, submission: PendingSubmission) {
        crate::sync::lock(&self.pending).push(submission);
    }

    /// Host ns (profiler clock) at which `event` completed.
    fn event_host_ns(&self, event: &Event) -> Result<u64> {
        // SAFETY: both events were recorded on this context and have completed.
        let ms = unsafe { cudarc::driver::result::event::elapsed(self.epoch.0, event.0) }
            .map_err(driver_error("reading an event time"))?;
        Ok(self.epoch_host_ns + (f64::from(ms) * 1e6) as u64)
    }

    /// Pinned host memory of at least `bytes`, from the pool when it has some.
    pub(crate) fn take_staging(&self, bytes: usize) -> Result<Staging> {
        let mut pool = crate::sync::lock(&self.staging);
        if let Some(position) = pool.iter().position(|block| block.bytes >= bytes) {
            return Ok(pool.swap_remove(position));
        }
        drop(pool);
        let rounded = bytes.max(1).next_multiple_of(4096);
        // SAFETY: a plain pinned allocation, freed by `Staging`'s drop.
        let pointer = unsafe { cudarc::driver::result::malloc_host(rounded, 0) }
            .map_err(driver_error("allocating pinned staging memory"))?;
        Ok(Staging {
            pointer: pointer as *mut u8,
            bytes: rounded,
        })
    }

    pub(crate) fn give_back_staging(&self, staging: Staging) {
        crate::sync::lock(&self.staging).push(staging);
    }

    pub(crate) fn give_back_event(&self, event: Event) {
        crate::sync::lock(&self.spare_events).push(event);
    }

    /// Waits for the stream, then turns every pending event pair into
    /// times; submissions whose dispatches CUPTI times wait in line for
    /// their records (see [`deliver`](Self::deliver)).
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.bind()?;
        self.stream
            .synchronize()
            .map_err(driver_error("synchronizing the stream"))?;
        let pending = std::mem::take(&mut *crate::sync::lock(&self.pending));
        self.resolve(pending)
    }

    /// Resolves the submissions that have finished, oldest first, without
    /// waiting for the ones still running (a read that waited only for its
    /// own copy).
    pub(crate) fn resolve_completed(&self) -> Result<()> {
        let finished = {
            let mut pending = crate::sync::lock(&self.pending);
            let done = pending
                .iter()
                // SAFETY: end events recorded on this context's stream.
                .take_while(|submission| {
                    unsafe { cudarc::driver::result::event::query(submission.end.0) }.is_ok()
                })
                .count();
            pending.drain(..done).collect::<Vec<_>>()
        };
        self.resolve(finished)
    }

    /// Turns finished submissions' event pairs into times.
    fn resolve(&self, pending: Vec<PendingSubmission>) -> Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        let mut spare = Vec::new();
        let mut resolved = Vec::with_capacity(pending.len());
        for submission in pending {
            // The start is placed through the epoch; the duration comes from
            // the pair itself, which keeps full precision however long the
            // process has run.
            let start_ns = self.event_host_ns(&submission.start)?;
            // SAFETY: both events completed (the stream was synchronized).
            let span_ms =
                unsafe { cudarc::driver::result::event::elapsed(submission.start.0, submission.end.0) }
                    .map_err(driver_error("reading a submission time"))?;
            let end_ns = start_ns + (f64::from(span_ms.max(0.0)) * 1e6) as u64;
            let mut dispatches = Vec::with_capacity(submission.timed_dispatches.len());
            for dispatch in submission.timed_dispatches {
                let times = match dispatch.events {
                    Some((before, after)) => {
                        // Durations come from the pair itself (finer than epoch offsets).
                        // SAFETY: both events completed (the stream was synchronized).
                        let ms = unsafe { cudarc::driver::result::event::elapsed(before.0, after.0) }
                            .map_err(driver_error("reading a dispatch time"))?;
                        let start = self.event_host_ns(&before)?;
                        spare.push(before);
                        spare.push(after);
                        Some((start, start + (f64::from(ms.max(0.0)) * 1e6) as u64))
                    }
                    None => None,
                };
                dispatches.push(ResolvedDispatch {
                    index: dispatch.index,
                    meta: dispatch.meta,
                    times,
                });
            }
            resolved.push(ResolvedSubmission {
                record: SubmissionRecord {
                    label: submission.label,
                    submission: submission.submission,
                    stream: 0,
                    token: submission.token,
                    start_ns,
                    end_ns,
                    dispatches: submission.dispatches,
                    host_enqueue_ns: submission.host_enqueue_ns,
                    gated: submission.gated,
                },
                dispatches,
            });
            spare.push(submission.start);
            spare.push(submission.end);
        }
        crate::sync::lock(&self.spare_events).extend(spare);
        crate::sync::lock(&self.awaiting).submissions.extend(resolved);
        self.deliver(false);
        Ok(())
    }

    /// Hands the profiler every waiting submission whose CUPTI records have
    /// come, in submission order. CUPTI hands records over a buffer at a
    /// time; forcing a flush at every host wait costs the flush and slows
    /// the next graph launch (measured on an H100: 526 -> 367 µs of host
    /// time per profiled graph launch, 380 -> 414 tok/s on llama-3.2-1b),
    /// so the wait only takes what is ready and `force` (readers of the
    /// profile, through `Profiler::deliver_late_records`) takes the rest.
    pub(crate) fn deliver(&self, force: bool) {
        let mut awaiting = crate::sync::lock(&self.awaiting);
        let Awaiting { submissions, kernels } = &mut *awaiting;
        let mut taken = false;
        while let Some(front) = submissions.front() {
            let needed = front.dispatches.iter().filter(|d| d.times.is_none()).count();
            if needed > kernels.len() {
                match &self.cupti {
                    Some(clock) if !taken => {
                        kernels.extend(super::cupti::take(clock.key, force));
                        taken = true;
                        continue;
                    }
                    _ if !force => break,
                    _ => {}
                }
            }
            let submission = submissions.pop_front().expect("front exists");
            let label = submission.record.label.clone();
            let mut records = Vec::with_capacity(submission.dispatches.len());
            for dispatch in submission.dispatches {
                let times = match dispatch.times {
                    Some(times) => Some(times),
                    None => self.match_cupti_record(&dispatch.meta, kernels),
                };
                if let Some((start, end)) = times {
                    records.push(dispatch.meta.record(
                        &label,
                        submission.record.submission,
                        dispatch.index,
                        submission.record.token,
                        start,
                        end.max(start),
                    ));
                }
            }
            self.profiler.record_submission(submission.record, records);
        }
    }

    /// The next CUPTI record, if it is `meta`'s kernel: records come in
    /// stream order, one per kernel. Once they do not line up, dispatch
    /// times from CUPTI are dropped for good (one warning) rather than
    /// attributed to the wrong kernels.
    fn match_cupti_record(
        &self,
        meta: &DispatchMeta,
        kernels: &mut VecDeque<KernelActivity>,
    ) -> Option<(u64, u64)> {
        let clock = self.cupti.as_ref()?;
        if !self.cupti_lined_up.load(Ordering::Relaxed) {
            return None;
        }
        let activity = kernels.pop_front();
        match activity {
            Some(activity) if activity.name == *meta.kernel => {
                Some((clock.to_host(activity.start), clock.to_host(activity.end)))
            }
            other => {
                self.cupti_lined_up.store(false, Ordering::Relaxed);
                kernels.clear();
                self.profiler.warn_once(
                    "cupti-mismatch",
                    &format!(
                        "kernelscope: CUPTI records do not line up with the dispatches (expected `{}`, got {:?}); dispatch times from CUPTI are dropped from here on",
                        meta.kernel,
                        other.map(|activity| activity.name)
                    ),
                );
                None
            }
        }
    }
}

/// Pinned host memory that device-to-host reads land in, pooled by the
/// device (pinning is slow; a decode loop reads a token back every step).
pub(crate) struct Staging {
    pub pointer: *mut u8,
    pub bytes: usize,
}

// SAFETY: plain pinned host memory owned by this value; whoever holds it
// has it alone (the pool hands each block to one read at a time).
unsafe impl Send for Staging {}

impl Drop for Staging {
    fn drop(&mut self) {
        // SAFETY: allocated by `malloc_host` in `take_staging`, freed once.
        unsafe {
            let _ = cudarc::driver::result::free_host(self.pointer as *mut std::ffi::c_void);
        }
    }
}

/// A dispatch whose times are known (`times`) or await its CUPTI record.
struct ResolvedDispatch {
    index: u32,
    meta: DispatchMeta,
    times: Option<(u64, u64)>,
}

/// A submission whose own times are known; its dispatches may still wait.
struct ResolvedSubmission {
    record: SubmissionRecord,
    dispatches: Vec<ResolvedDispatch>,
}

/// Submissions waiting, in order, for CUPTI records, and the records taken
/// but not yet matched.
#[derive(Default)]
struct Awaiting {
    submissions: VecDeque<ResolvedSubmission>,
    kernels: VecDeque<KernelActivity>,
}

impl Drop for CudaShared {
    fn drop(&mut self) {
        // CUPTI's records are collected process-wide by stream; a stream
        // that is going away will never claim the ones still waiting.
        if let Some(clock) = &self.cupti {
            super::cupti::forget(clock.key);
        }
    }
}

/// A CUDA device handle (cheap to clone).
#[derive(Clone)]
pub struct CudaDevice {
    pub(crate) shared: Arc<CudaShared>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaDevice({})", self.shared.name)
    }
}

/// A kernel compiled for one CUDA device.
#[derive(Clone)]
pub(crate) struct CudaKernel {
    pub function: CudaFunction,
}

/// The CUDA graph instantiated from a captured [`Graph`](crate::Graph) on
/// its first replay.
#[derive(Default)]
pub(crate) struct CudaGraphCache {
    pub exec: OnceLock<GraphExec>,
}

impl std::fmt::Debug for CudaGraphCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaGraphCache(instantiated: {})", self.exec.get().is_some())
    }
}

/// An instantiated CUDA graph, destroyed on drop (while its context, which
/// it keeps alive, is still there).
pub(crate) struct GraphExec {
    pub graph: sys::CUgraph,
    pub exec: sys::CUgraphExec,
    pub shared: Arc<CudaShared>,
}

// SAFETY: graph handles are usable from any thread; every launch of it
// happens under the device's `submitting` lock, so no two threads use it at once.
unsafe impl Send for GraphExec {}
// SAFETY: as above; the handles are only read after instantiation.
unsafe impl Sync for GraphExec {}

impl Drop for GraphExec {
    fn drop(&mut self) {
        if self.shared.bind().is_err() {
            return;
        }
        // SAFETY: created by instantiate/end_capture and destroyed once, with
        // the context bound.
        unsafe {
            let _ = cudarc::driver::result::graph::exec_destroy(self.exec);
            let _ = cudarc::driver::result::graph::destroy(self.graph);
        }
    }
}

fn unavailable(reason: String) -> Error {
    Error::BackendUnavailable {
        backend: "cuda",
        reason,
    }
}

fn driver_present() -> bool {
    // SAFETY: only tries to load the driver library by its known names.
    unsafe { sys::is_culib_present() }
}

impl CudaDevice {
    /// How many GPUs there are, or why none can be used.
    pub fn probe() -> std::result::Result<usize, CudaUnavailable> {
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
        let count = Self::probe()
            .map_err(|reason| unavailable(format!("cuda:{ordinal}: {reason}; use --device cpu")))?;
        if ordinal >= count {
            return Err(unavailable(format!(
                "cuda:{ordinal}: there are only {count} GPU(s) (cuda:0..cuda:{})",
                count - 1
            )));
        }
        let context = CudaContext::new(ordinal).map_err(driver_error("creating a context"))?;
        // SAFETY: our buffers are raw allocations ordered by our one stream;
        // nothing relies on cudarc's per-buffer events.
        unsafe { context.disable_event_tracking() };
        let stream = context.new_stream().map_err(driver_error("creating a stream"))?;
        let gpu = context.name().map_err(driver_error("reading the device name"))?;
        let (major, minor) = context
            .compute_capability()
            .map_err(driver_error("reading the compute capability"))?;
        let arch: &'static str = Box::leak(format!("sm_{major}{minor}").into_boxed_str());
        let mut version = 0;
        // SAFETY: writes one int.
        unsafe { sys::cuDriverGetVersion(&mut version) };
        let driver = format!("CUDA driver API {}.{}", version / 1000, (version % 1000) / 10);
        let (dispatch_timing, cupti_stream) = match &options.dispatch_timing_unsupported {
            Some(reason) => (
                DispatchTiming::Unsupported {
                    reason: reason.clone(),
                },
                None,
            ),
            None if options.profile_level() == crate::profile::ProfileLevel::Dispatch => {
                let key = super::cupti::start()
                    .and_then(|()| super::cupti::stream_key(context.cu_ctx(), stream.cu_stream()));
                match key {
                    Ok(key) => (
                        DispatchTiming::Supported {
                            method: CUPTI_TIMING_METHOD.to_string(),
                        },
                        Some(key),
                    ),
                    Err(reason) => (
                        DispatchTiming::Supported {
                            method: format!("{EVENT_TIMING_METHOD} (CUPTI unavailable: {reason})"),
                        },
                        None,
                    ),
                }
            }
            // CUPTI costs something on every launch: only dispatch-level
            // profiling turns it on. Say what that level would use.
            None => {
                // SAFETY: only tries to load the library by its known names.
                let method = if unsafe { cudarc::cupti::sys::is_culib_present() } {
                    CUPTI_TIMING_METHOD
                } else {
                    EVENT_TIMING_METHOD
                };
                (
                    DispatchTiming::Supported {
                        method: method.to_string(),
                    },
                    None,
                )
            }
        };
        let profiler = Profiler::new(options.profile_level(), dispatch_timing);
        let cupti = cupti_stream.map(|key| CuptiClock::calibrate(&profiler, key));
        let epoch = Event(
            cudarc::driver::result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                .map_err(driver_error("creating an event"))?,
        );
        // SAFETY: a fresh event on our stream.
        unsafe { cudarc::driver::result::event::record(epoch.0, stream.cu_stream()) }
            .map_err(driver_error("recording an event"))?;
        // The epoch's host time: the midpoint of a host bracket around the
        // wait for it, the tightest of a few tries (its own event re-recorded).
        let mut epoch_host_ns = 0;
        let mut tightest = u64::MAX;
        for _ in 0..4 {
            // SAFETY: the epoch event and our stream, both valid.
            unsafe { cudarc::driver::result::event::record(epoch.0, stream.cu_stream()) }
                .map_err(driver_error("recording an event"))?;
            let before = profiler.now_ns();
            stream
                .synchronize()
                .map_err(driver_error("synchronizing the stream"))?;
            let after = profiler.now_ns();
            if after - before < tightest {
                tightest = after - before;
                epoch_host_ns = before + (after - before) / 2;
            }
        }
        // Only CUPTI slows the enqueue enough to leave the device idle inside
        // a submission; without it the gate would be a needless stream wait.
        let gate = match &cupti {
            Some(_) => match Gate::new() {
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
            },
            None => None,
        };
        let shared = Arc::new(CudaShared {
            name: format!("cuda:{ordinal} {gpu} ({arch})"),
            context,
            stream,
            profiler,
            arch,
            driver,
            modules: Mutex::new(HashMap::new()),
            pending: Mutex::new(Vec::new()),
            awaiting: Mutex::new(Awaiting::default()),
            staging: Mutex::new(Vec::new()),
            cupti_lined_up: AtomicBool::new(true),
            spare_events: Mutex::new(Vec::new()),
            epoch,
            epoch_host_ns,
            cupti,
            submitting: Mutex::new(()),
            gate,
        });
        // Weak: the profiler lives inside `shared`.
        let weak = Arc::downgrade(&shared);
        shared.profiler.set_late_records(Box::new(move || {
            if let Some(shared) = weak.upgrade() {
                shared.deliver(true);
            }
        }));
        Ok(CudaDevice { shared })
    }

    pub(crate) fn name(&self) -> &str {
        &self.shared.name
    }

    pub(crate) fn profiler(&self) -> &Profiler {
        &self.shared.profiler
    }

    pub(crate) fn capabilities(&self) -> Capabilities {
        Capabilities {
            submission_timing: SUBMISSION_TIMING_METHOD.to_string(),
            dispatch_timing: self.shared.profiler.dispatch_timing().clone(),
            dispatch_timing_in_graphs: self.shared.cupti.is_some(),
            nvtx: Some(super::nvtx::active()),
            graph_launch: true,
            maps_files_in_place: false,
        }
    }

    pub(crate) fn driver_version(&self) -> Option<String> {
        Some(self.shared.driver.clone())
    }

    pub(crate) fn same_device(&self, other: &CudaDevice) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    pub(crate) fn owns(&self, buffer: &Buffer) -> bool {
        match &buffer.memory {
            Memory::Cuda(memory) => Arc::ptr_eq(memory.shared(), &self.shared),
            Memory::Cpu(_) => false,
        }
    }

    pub(crate) fn memory_info(&self) -> Option<crate::runtime::device::MemoryInfo> {
        let (free, total) = self.shared.context.mem_get_info().ok()?;
        Some(crate::runtime::device::MemoryInfo {
            free: free as u64,
            total: total as u64,
        })
    }

    pub(crate) fn alloc(&self, dtype: DType, shape: &[usize]) -> Result<Buffer> {
        let byte_len = shape.iter().product::<usize>() * dtype.size_in_bytes();
        let memory = CudaMemory::zeroed(self.shared.clone(), byte_len)?;
        Ok(Buffer::new(Memory::Cuda(Arc::new(memory)), dtype, shape.to_vec()))
    }

    pub(crate) fn upload_mapped(
        &self,
        map: Arc<memmap2::Mmap>,
        offset: usize,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Buffer> {
        let buffer = self.alloc(dtype, shape)?;
        let end = offset + buffer.byte_len();
        let bytes = map.get(offset..end).ok_or_else(|| Error::OutOfBounds {
            context: "upload of a mapped tensor".into(),
            start: offset,
            end,
            available: map.len(),
        })?;
        buffer.write_bytes(bytes)?;
        Ok(buffer)
    }

    pub(crate) fn kernel(&self, name: &str, source: &str) -> Result<CudaKernel> {
        let shared = &self.shared;
        shared.bind()?;
        let key = compile::source_key(source, shared.arch);
        let module = {
            let mut modules = crate::sync::lock(&shared.modules);
            match modules.get(&key) {
                Some(module) => module.clone(),
                None => {
                    let ptx = compile::compile(name, source, shared.arch, key, true)?;
                    let module = match shared.context.load_module(ptx) {
                        Ok(module) => module,
                        // A cached file the driver rejects (damaged, or from
                        // another driver): compile afresh, which rewrites it.
                        Err(_) => {
                            let ptx = compile::compile(name, source, shared.arch, key, false)?;
                            shared
                                .context
                                .load_module(ptx)
                                .map_err(driver_error("loading a module"))?
                        }
                    };
                    modules.insert(key, module.clone());
                    module
                }
            }
        };
        let function = module.load_function(name).map_err(|error| Error::KernelMissing {
            name: name.to_string(),
            backend: "cuda",
            workaround: format!("its CUDA source defines no `extern \"C\" __global__ {name}` ({error})"),
        })?;
        Ok(CudaKernel { function })
    }

    pub(crate) fn execute(&self, commands: &[Command], label: &Arc<str>) -> Result<()> {
        super::execute::execute(&self.shared, commands, label)
    }

    pub(crate) fn wait(&self) -> Result<()> {
        self.shared.synchronize()
    }
}
