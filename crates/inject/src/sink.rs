//! The process's record file and what waits to go into it. CUPTI's buffers
//! are written by its own thread as they complete; records made on the
//! program's threads (API calls, NVTX ranges, devices) are only queued
//! there, a push under an uncontended lock, and written by the flusher
//! every [`FLUSH_PERIOD`], so the program never waits on the file.

use std::fs::{File, OpenOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::Duration;

use crate::lock;
use kernelscope_trace::{ApiCall, Device, Kernel, NvtxRange, PmSample, Writer};

/// The environment variable naming the directory the records go to.
pub const TRACE_DIR_ENV_VAR: &str = "KSCOPE_TRACE_DIR";

/// How often finished buffers and queued records are written.
pub const FLUSH_PERIOD: Duration = Duration::from_millis(100);

/// Records made on the program's threads, not yet written.
#[derive(Default)]
struct Queued {
    calls: Vec<ApiCall>,
    /// Ranges with their message and domain, whose text ids are given when written.
    ranges: Vec<(NvtxRange, String, String)>,
    /// Devices with their names.
    devices: Vec<(Device, String)>,
    /// DRAM samples of the performance monitor.
    samples: Vec<PmSample>,
    /// Kernels timed here rather than by CUPTI (graph launches timed by
    /// events), with their names.
    kernels: Vec<(Kernel, String)>,
}

static SINK: Mutex<Option<Writer<File>>> = Mutex::new(None);
static QUEUED: Mutex<Queued> = Mutex::new(Queued {
    calls: Vec::new(),
    ranges: Vec::new(),
    devices: Vec::new(),
    samples: Vec::new(),
    kernels: Vec::new(),
});

/// Opens the file, starts the flusher and registers the exit handlers, once
/// per process, whichever entry point (CUDA's or NVTX's) comes first; the
/// same answer to every later call.
pub(crate) fn ensure_open() -> Result<(), String> {
    static OPENED: OnceLock<Result<(), String>> = OnceLock::new();
    OPENED.get_or_init(open).clone()
}

fn open() -> Result<(), String> {
    let directory =
        std::env::var_os(TRACE_DIR_ENV_VAR).ok_or_else(|| format!("{TRACE_DIR_ENV_VAR} is not set"))?;
    let pid = std::process::id();
    let path = std::path::Path::new(&directory).join(format!("{pid}.kst"));
    let file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)
        .map_err(|error| format!("{}: {error}", path.display()))?;
    let writer =
        Writer::new(file, &crate::header(pid)).map_err(|error| format!("{}: {error}", path.display()))?;
    *lock(&SINK) = Some(writer);
    OPENED.store(true, Ordering::Release);
    // SAFETY: registers a plain `extern "C" fn()` that only sets an atomic.
    unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    if crate::collection::omitted().flusher {
        return crate::exit::install();
    }
    std::thread::Builder::new()
        .name("kscope-flush".into())
        .spawn(|| {
            loop {
                std::thread::sleep(FLUSH_PERIOD);
                crate::collection::flush(false);
                crate::graph_events::resolve(false);
                write_queued_now(false);
            }
        })
        .map_err(|error| format!("starting the flusher: {error}"))?;
    crate::exit::install()
}

/// Whether the file was opened (by this process or the one it was forked from).
static OPENED: AtomicBool = AtomicBool::new(false);

/// Set in a child forked after the file was opened. It inherits the open
/// file, the queue, the exit handlers and the graph timing's state, and
/// must write none of it (its `exit()` once wrote an end frame into the
/// middle of the parent's file).
static INHERITED: AtomicBool = AtomicBool::new(false);

extern "C" fn forked_child() {
    INHERITED.store(true, Ordering::Release);
}

/// Whether this process opened the file (not a child forked from the one that did).
pub(crate) fn opened_here() -> bool {
    OPENED.load(Ordering::Acquire) && !inherited()
}

/// Whether this process is a child forked after the file was opened: nothing recorded here is its own.
pub(crate) fn inherited() -> bool {
    INHERITED.load(Ordering::Acquire)
}

/// Queues one API call.
pub(crate) fn push_call(call: ApiCall) {
    lock(&QUEUED).calls.push(call);
}

/// Queues one closed NVTX range; its `message` and `domain` fields are
/// filled from `message` and `domain` ("" for the default domain) when
/// written.
pub(crate) fn push_range(range: NvtxRange, message: &str, domain: &str) {
    lock(&QUEUED)
        .ranges
        .push((range, message.to_string(), domain.to_string()));
}

/// Queues one device; its `name` field is filled from `name` when written.
pub(crate) fn push_device(device: Device, name: &str) {
    lock(&QUEUED).devices.push((device, name.to_string()));
}

/// Queues one kernel timed here; its `name` field is filled from `name` when written.
pub(crate) fn push_kernel(kernel: Kernel, name: &str) {
    lock(&QUEUED).kernels.push((kernel, name.to_string()));
}

/// Queues DRAM samples of the performance monitor.
pub(crate) fn push_samples(samples: &[PmSample]) {
    lock(&QUEUED).samples.extend_from_slice(samples);
}

/// Writes what is queued. Never blocks on a lock when `from_signal` (a
/// crashed thread may hold it): then nothing is written.
pub(crate) fn write_queued_now(from_signal: bool) {
    if !opened_here() {
        return;
    }
    let taken = if from_signal {
        match QUEUED.try_lock() {
            Ok(mut queued) => std::mem::take(&mut *queued),
            Err(TryLockError::Poisoned(poisoned)) => std::mem::take(&mut *poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => return,
        }
    } else {
        std::mem::take(&mut *lock(&QUEUED))
    };
    let Some(mut sink) = (if from_signal {
        try_lock(&SINK)
    } else {
        Some(lock(&SINK))
    }) else {
        return;
    };
    let Some(writer) = sink.as_mut() else { return };
    let written = (|| {
        for (mut device, name) in taken.devices {
            device.name = writer.text(&name)?;
            writer.record(&device)?;
        }
        for (mut range, message, domain) in taken.ranges {
            range.message = writer.text(&message)?;
            range.domain = if domain.is_empty() {
                0
            } else {
                writer.text(&domain)?
            };
            writer.record(&range)?;
        }
        for call in &taken.calls {
            writer.record(call)?;
        }
        for sample in &taken.samples {
            writer.record(sample)?;
        }
        for (mut kernel, name) in taken.kernels {
            kernel.name = writer.text(&name)?;
            writer.record(&kernel)?;
        }
        Ok::<(), kernelscope_trace::TraceError>(())
    })();
    if let Err(error) = written {
        eprintln!("kscope profile: writing records failed, recording stops: {error}");
        *sink = None;
    }
}

/// The sink, for CUPTI's buffer thread and the exit handlers.
pub(crate) fn sink() -> MutexGuard<'static, Option<Writer<File>>> {
    lock(&SINK)
}

/// The sink unless another thread holds it (a signal handler must not wait).
pub(crate) fn try_sink() -> Option<MutexGuard<'static, Option<Writer<File>>>> {
    try_lock(&SINK)
}

fn try_lock<T>(mutex: &'static Mutex<T>) -> Option<MutexGuard<'static, T>> {
    match mutex.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}
