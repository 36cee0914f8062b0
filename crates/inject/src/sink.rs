//! The process's record file and what waits to go into it. CUPTI's buffers
//! are written by its own thread as they complete; records made on the
//! program's threads (API calls, NVTX ranges, devices) are only queued
//! there, a push under an uncontended lock, and written by the flusher
//! (`startup`) every [`FLUSH_PERIOD`], so the program never waits on the
//! file.
//!
//! Uses only the foundations (`settings`, `locking`); every module that
//! records something uses it. Opening it is `startup`'s, which starts the
//! flusher and the exit handlers with it.

use std::fs::{File, OpenOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use cudarc::cupti::sys;
use kernelscope_trace::{ApiCall, Device, Header, Kernel, NvtxRange, PmSample, Writer};

use crate::locking::{lock, try_lock};
use crate::settings::settings;

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

/// The file and its queue, process-wide: CUPTI's buffer callback, the
/// exit and signal handlers and the fork handler reach it without a
/// pointer of ours.
struct RecordFile {
    /// The file's writer; `None` before it opens, after the end frame, or
    /// once writing failed.
    writer: Mutex<Option<Writer<File>>>,
    queued: Mutex<Queued>,
    /// Whether the file was opened (by this process or the one it was forked from).
    opened: AtomicBool,
    /// Set in a child forked after the file was opened. It inherits the
    /// open file, the queue, the exit handlers and the graph timing's
    /// state, and must write none of it (its `exit()` once wrote an end
    /// frame into the middle of the parent's file).
    inherited: AtomicBool,
}

static RECORD_FILE: RecordFile = RecordFile {
    writer: Mutex::new(None),
    queued: Mutex::new(Queued {
        calls: Vec::new(),
        ranges: Vec::new(),
        devices: Vec::new(),
        samples: Vec::new(),
        kernels: Vec::new(),
    }),
    opened: AtomicBool::new(false),
    inherited: AtomicBool::new(false),
};

/// Opens `$KSCOPE_TRACE_DIR/<pid>.kst` and writes its header. Called once
/// per process, by `startup`.
pub(crate) fn open() -> Result<(), String> {
    use kernelscope_trace::injection_settings::TRACE_DIR_VARIABLE;
    let directory = (settings().injection.trace_dir.as_ref())
        .ok_or_else(|| format!("{TRACE_DIR_VARIABLE} is not set"))?;
    let pid = std::process::id();
    let path = directory.join(format!("{pid}.kst"));
    let file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)
        .map_err(|error| format!("{}: {error}", path.display()))?;
    let writer = Writer::new(file, &header(pid)).map_err(|error| format!("{}: {error}", path.display()))?;
    *lock(&RECORD_FILE.writer) = Some(writer);
    RECORD_FILE.opened.store(true, Ordering::Release);
    // SAFETY: registers a plain `extern "C" fn()` that only sets an atomic.
    unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    Ok(())
}

/// Who this process is: the header of its file.
fn header(pid: u32) -> Header {
    let mut cupti_version = 0u32;
    // SAFETY: one out-parameter; CUPTI may not be loadable yet, then the call fails and the version stays unknown.
    let version_known =
        unsafe { sys::is_culib_present() && sys::cuptiGetVersion(&mut cupti_version).result().is_ok() };
    let settings = settings();
    Header {
        pid,
        // SAFETY: getppid has no preconditions.
        parent_pid: unsafe { libc::getppid() } as u32,
        command: std::env::args().collect(),
        rank: settings.rank,
        local_rank: settings.local_rank,
        world_size: settings.world_size,
        cupti_version: version_known.then_some(cupti_version),
        devices: Vec::new(),
    }
}

extern "C" fn forked_child() {
    RECORD_FILE.inherited.store(true, Ordering::Release);
}

/// Whether this process opened the file (not a child forked from the one that did).
pub(crate) fn opened_here() -> bool {
    RECORD_FILE.opened.load(Ordering::Acquire) && !inherited()
}

/// Whether this process is a child forked after the file was opened: nothing recorded here is its own.
pub(crate) fn inherited() -> bool {
    RECORD_FILE.inherited.load(Ordering::Acquire)
}

/// Queues one API call.
pub(crate) fn push_call(call: ApiCall) {
    lock(&RECORD_FILE.queued).calls.push(call);
}

/// Queues one closed NVTX range; its `message` and `domain` fields are
/// filled from `message` and `domain` ("" for the default domain) when
/// written.
pub(crate) fn push_range(range: NvtxRange, message: &str, domain: &str) {
    lock(&RECORD_FILE.queued)
        .ranges
        .push((range, message.to_string(), domain.to_string()));
}

/// Queues one device; its `name` field is filled from `name` when written.
pub(crate) fn push_device(device: Device, name: &str) {
    lock(&RECORD_FILE.queued).devices.push((device, name.to_string()));
}

/// Queues one kernel timed here; its `name` field is filled from `name` when written.
pub(crate) fn push_kernel(kernel: Kernel, name: &str) {
    lock(&RECORD_FILE.queued).kernels.push((kernel, name.to_string()));
}

/// Queues DRAM samples of the performance monitor.
pub(crate) fn push_samples(samples: &[PmSample]) {
    lock(&RECORD_FILE.queued).samples.extend_from_slice(samples);
}

/// Writes what is queued. Never blocks on a lock when `from_signal` (a
/// crashed thread may hold it): then nothing is written.
pub(crate) fn write_queued_now(from_signal: bool) {
    if !opened_here() {
        return;
    }
    let taken = if from_signal {
        match RECORD_FILE.queued.try_lock() {
            Ok(mut queued) => std::mem::take(&mut *queued),
            Err(TryLockError::Poisoned(poisoned)) => std::mem::take(&mut *poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => return,
        }
    } else {
        std::mem::take(&mut *lock(&RECORD_FILE.queued))
    };
    let Some(mut sink) = (if from_signal {
        try_lock(&RECORD_FILE.writer)
    } else {
        Some(lock(&RECORD_FILE.writer))
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

/// The file's writer, for CUPTI's buffer thread and the exit handlers.
pub(crate) fn sink() -> MutexGuard<'static, Option<Writer<File>>> {
    lock(&RECORD_FILE.writer)
}

/// The file's writer unless another thread holds it (a signal handler must not wait).
pub(crate) fn try_sink() -> Option<MutexGuard<'static, Option<Writer<File>>>> {
    try_lock(&RECORD_FILE.writer)
}
