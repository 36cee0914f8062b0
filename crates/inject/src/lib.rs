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
mod collection;
mod devices;
mod exit;
mod graph_events;
mod nvtx;
mod pm;
mod records;
mod sampler_gate;
mod sink;
mod window;

use std::ffi::c_int;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use cudarc::cupti::sys;
use kernelscope_trace::Header;

pub use callbacks::API_CALLS_ENV_VAR;
pub use collection::{DEVICE_BUFFER_ENV_VAR, GRAPHS_ENV_VAR, OMIT_ENV_VAR};
pub use sink::{FLUSH_PERIOD, TRACE_DIR_ENV_VAR};
pub use window::{STEP_ENV_VAR, WINDOW_ENV_VAR};

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

/// Opens the record file (if NVTX has not) and attaches to CUPTI
/// (`collection`): now, or with a window of steps when the window opens.
fn start() -> Result<(), String> {
    sink::ensure_open()?;
    // Graph launches timed by events (or CUPTI left out): CUPTI is never
    // touched, and the collection stays where a window cannot move it.
    if !collection::attaches() {
        return Ok(());
    }
    // SAFETY: only tries to load the library by its known names.
    if !unsafe { sys::is_culib_present() } {
        return Err("libcupti is not on the loader path".into());
    }
    collection::cuda_started()
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

/// `mutex`'s guard, poisoned or not: a panic is caught at every entry point
/// (none may cross the C boundary), and each update under the library's
/// locks leaves its data whole, so the program goes on profiled.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
