//! The library `kscope profile` loads into the program it profiles: the
//! CUDA driver, given `CUDA_INJECTION64_PATH`, loads it inside `cuInit` and
//! calls [`InitializeInjection`]. It subscribes to CUPTI's activity records
//! (kernels, copies, sets) and writes each buffer CUPTI hands back as
//! kernelscope-trace frames to `$KSCOPE_TRACE_DIR/<pid>.kst`. A thread
//! asks CUPTI for its finished buffers every [`FLUSH_PERIOD`], so a process
//! that dies leaves all but its last period's records; at exit the rest are
//! flushed and the end frame written.
//!
//! Nothing here may panic across the C boundary: every entry point catches
//! unwinding, and a failure is a line on stderr naming kscope, after which
//! the program runs on unprofiled.

mod records;

use std::ffi::c_int;
use std::fs::{File, OpenOptions};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use cudarc::cupti::{result as cupti, sys};
use kernelscope_trace::{End, Header, Writer};

/// The environment variable naming the directory the records go to.
pub const TRACE_DIR_ENV_VAR: &str = "KSCOPE_TRACE_DIR";

/// How often finished buffers are asked for.
pub const FLUSH_PERIOD: Duration = Duration::from_millis(100);

/// The process's record file, once open.
fn sink() -> &'static Mutex<Option<Writer<File>>> {
    static SINK: OnceLock<Mutex<Option<Writer<File>>>> = OnceLock::new();
    SINK.get_or_init(|| Mutex::new(None))
}

/// Called by the CUDA driver once it has loaded the library: 1 when
/// recording started, 0 when it could not (said on stderr).
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjection() -> c_int {
    static STARTED: OnceLock<bool> = OnceLock::new();
    let started = *STARTED.get_or_init(|| match std::panic::catch_unwind(start) {
        Ok(Ok(())) => true,
        Ok(Err(problem)) => {
            eprintln!(
                "kscope profile: not recording this process ({}): {problem}",
                std::process::id()
            );
            false
        }
        Err(_) => {
            eprintln!(
                "kscope profile: not recording this process ({}): the injection library panicked",
                std::process::id()
            );
            false
        }
    });
    c_int::from(started)
}

/// Opens the record file, subscribes to CUPTI, starts the flusher and
/// registers the exit handler.
fn start() -> Result<(), String> {
    let directory =
        std::env::var_os(TRACE_DIR_ENV_VAR).ok_or_else(|| format!("{TRACE_DIR_ENV_VAR} is not set"))?;
    // SAFETY: only tries to load the library by its known names.
    if !unsafe { sys::is_culib_present() } {
        return Err("libcupti is not on the loader path".into());
    }
    let pid = std::process::id();
    let path = std::path::Path::new(&directory).join(format!("{pid}.kst"));
    let file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)
        .map_err(|error| format!("{}: {error}", path.display()))?;
    let writer = Writer::new(file, &header(pid)).map_err(|error| format!("{}: {error}", path.display()))?;
    *lock_sink() = Some(writer);
    cupti::activity::register_callbacks(Some(records::buffer_requested), Some(records::buffer_completed))
        .map_err(|error| format!("CUPTI refused its callbacks: {error}"))?;
    for kind in [
        sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
        sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY,
        sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET,
    ] {
        cupti::activity::enable(kind)
            .map_err(|error| format!("CUPTI refused {kind:?} (another profiler attached?): {error}"))?;
    }
    std::thread::Builder::new()
        .name("kscope-flush".into())
        .spawn(|| {
            loop {
                std::thread::sleep(FLUSH_PERIOD);
                // Completed buffers only: no forced flush, no synchronisation.
                let _ = cupti::activity::flush_all(0);
            }
        })
        .map_err(|error| format!("starting the flusher: {error}"))?;
    // SAFETY: registers a plain `extern "C" fn()` to run at exit.
    if unsafe { libc::atexit(at_exit) } != 0 {
        return Err("atexit refused the exit handler".into());
    }
    Ok(())
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

fn lock_sink() -> std::sync::MutexGuard<'static, Option<Writer<File>>> {
    sink().lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// At exit: every record CUPTI holds, then the end frame.
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let _ = cupti::activity::flush_all(1);
        if let Some(writer) = lock_sink().take() {
            let end = End {
                at_ns: records::now_ns(),
                signal: 0,
                dropped: records::dropped(),
            };
            if let Err(error) = writer.end(&end) {
                eprintln!("kscope profile: writing the end of this process's records: {error}");
            }
        }
    });
}
