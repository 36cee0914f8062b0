//! The library `kscope profile` loads into the program it profiles. The
//! CUDA driver, given `CUDA_INJECTION64_PATH`, loads it inside `cuInit` and
//! calls [`InitializeInjection`]: it subscribes to CUPTI's activity records
//! (kernels, copies, sets) and of the API calls a profile needs
//! (`callbacks`). The NVTX library, given `NVTX_INJECTION64_PATH`, loads it
//! on the program's first NVTX call and calls `InitializeInjectionNvtx2`
//! (`nvtx`), whose ranges become the profile's scopes and steps. Whichever
//! comes first opens `$KSCOPE_TRACE_DIR/<pid>.kst` (`sink`), where
//! everything goes as kernelscope-trace frames. A thread writes every
//! [`FLUSH_PERIOD`], so a process that dies leaves all but its last
//! period's records; at exit, or on a fatal signal (`exit`), the rest are
//! written and the end frame.
//!
//! Nothing here may panic across the C boundary: every entry point catches
//! unwinding, and a failure is a line on stderr naming kscope, after which
//! the program runs on unprofiled.

mod callbacks;
mod clock;
mod exit;
mod nvtx;
mod pm;
mod records;
mod sink;
mod window;

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use cudarc::cupti::{result as cupti, sys};
use kernelscope_trace::Header;

pub use callbacks::API_CALLS_ENV_VAR;
pub use sink::{FLUSH_PERIOD, TRACE_DIR_ENV_VAR};
pub use window::{STEP_ENV_VAR, WINDOW_ENV_VAR};

/// Whether CUPTI's activity records are being collected (what a flush asks for).
static COLLECTING: AtomicBool = AtomicBool::new(false);

/// Called by the CUDA driver once it has loaded the library: 1 when
/// recording started, 0 when it could not (said on stderr).
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjection() -> c_int {
    static STARTED: OnceLock<bool> = OnceLock::new();
    let started = *STARTED.get_or_init(|| match std::panic::catch_unwind(start) {
        Ok(Ok(())) => true,
        Ok(Err(problem)) => {
            eprintln!(
                "kscope profile: not recording this process's kernels ({}): {problem}",
                std::process::id()
            );
            false
        }
        Err(_) => {
            eprintln!(
                "kscope profile: not recording this process's kernels ({}): the injection library panicked",
                std::process::id()
            );
            false
        }
    });
    c_int::from(started)
}

/// Opens the record file (if NVTX has not), puts CUPTI on our clock,
/// subscribes to its records and callbacks.
fn start() -> Result<(), String> {
    sink::ensure_open()?;
    // SAFETY: only tries to load the library by its known names.
    if !unsafe { sys::is_culib_present() } {
        return Err("libcupti is not on the loader path".into());
    }
    // SAFETY: registers a plain `extern "C" fn() -> u64`, before any record is enabled.
    let clock = unsafe { sys::cuptiActivityRegisterTimestampCallback(Some(clock::cupti_timestamp)) };
    if clock != sys::CUptiResult::CUPTI_SUCCESS {
        return Err(format!("CUPTI refused kscope's clock ({clock:?})"));
    }
    cupti::activity::register_callbacks(Some(records::buffer_requested), Some(records::buffer_completed))
        .map_err(|error| format!("CUPTI refused its callbacks: {error}"))?;
    callbacks::subscribe(callbacks::ApiCallRecording::from_environment())?;
    let mut collecting = lock_collection();
    *collecting = Collection::Started { on: false };
    if window::collecting() {
        switch_collection(&mut collecting, true)?;
    }
    COLLECTING.store(true, Ordering::SeqCst);
    Ok(())
}

/// Whether CUPTI is set up, and collecting.
enum Collection {
    /// Not set up yet: a window opening now is acted on when it is.
    NotStarted,
    Started {
        on: bool,
    },
}

static COLLECTION: Mutex<Collection> = Mutex::new(Collection::NotStarted);

fn lock_collection() -> MutexGuard<'static, Collection> {
    COLLECTION.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The kinds of activity records collected.
const KINDS: [sys::CUpti_ActivityKind; 3] = [
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET,
];

/// Has CUPTI collect (`on`) or stop collecting, once it is set up.
fn switch_collection(collection: &mut Collection, on: bool) -> Result<(), String> {
    let Collection::Started { on: now } = collection else {
        return Ok(());
    };
    if *now == on {
        return Ok(());
    }
    for kind in KINDS {
        let switched = if on {
            cupti::activity::enable(kind)
        } else {
            cupti::activity::disable(kind)
        };
        switched.map_err(|error| {
            format!("CUPTI refused to switch {kind:?} (another profiler attached?): {error}")
        })?;
    }
    callbacks::record_calls_as_activity(on)?;
    *now = on;
    Ok(())
}

/// The window of steps opened (`on`) or closed: CUPTI collects or stops.
pub(crate) fn set_collecting(on: bool) {
    if let Err(problem) = switch_collection(&mut lock_collection(), on) {
        eprintln!("kscope profile: {problem}");
    }
}

/// Asks CUPTI for its finished buffers (`forced`: every record, even of
/// buffers not yet full); nothing when CUPTI is not collecting.
pub(crate) fn cupti_flush(forced: bool) {
    if COLLECTING.load(Ordering::SeqCst) {
        // Without force: completed buffers only, no synchronisation.
        let _ = cupti::activity::flush_all(u32::from(forced));
    }
}

/// Who this process is: the header of its file.
fn header(pid: u32) -> Header {
    let number = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.trim().parse().ok())
    };
    let mut cupti_version = 0u32;
    // SAFETY: one out-parameter; CUPTI may not be loadable yet, then the call fails and the version stays unknown.
    let version_known =
        unsafe { sys::is_culib_present() && sys::cuptiGetVersion(&mut cupti_version).result().is_ok() };
    Header {
        pid,
        // SAFETY: getppid has no preconditions.
        parent_pid: unsafe { libc::getppid() } as u32,
        command: std::env::args().collect(),
        rank: number("RANK"),
        local_rank: number("LOCAL_RANK"),
        world_size: number("WORLD_SIZE"),
        cupti_version: version_known.then_some(cupti_version),
        devices: Vec::new(),
    }
}
