//! How a process's records end. At a normal exit the atexit handler
//! flushes CUPTI, writes what is queued and the end frame. On a fatal
//! signal (a crash, a kill the program does not handle) the handler does
//! the same, best effort, then lets the signal do what it would have done:
//! the program's own handler runs as before, and a signal left at its
//! default still kills the process, so its exit status is unchanged.
//!
//! Flushing inside a signal handler is not async-signal-safe (a crashed
//! thread may hold CUPTI's locks or ours): locks are only tried, never
//! waited on, and `alarm` bounds the whole attempt to [`SIGNAL_FLUSH_SECONDS`],
//! after which SIGALRM ends the process without the last period's records.
//!
//! Near the top: uses `collection`, `pm`, `graph_events`, `records`, `sink`
//! and `clock` to save what there is; `startup` installs the handlers.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use kernelscope_trace::End;

/// Longest a signal handler may spend saving records.
pub const SIGNAL_FLUSH_SECONDS: u32 = 2;

/// Signals whose default ends the process and that a handler can catch.
const FATAL_SIGNALS: [libc::c_int; 7] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGABRT,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGTERM,
    libc::SIGINT,
];

/// What the handlers keep, process-wide: a signal handler and `atexit`
/// take no pointer of ours.
struct Handlers {
    /// The disposition each signal had before ours, indexed like
    /// [`FATAL_SIGNALS`] (unset: none known, taken as the default).
    previous: [OnceLock<libc::sigaction>; FATAL_SIGNALS.len()],
    /// Set once the end frame is written (or being written).
    ended: AtomicBool,
}

static HANDLERS: Handlers = Handlers {
    previous: [const { OnceLock::new() }; FATAL_SIGNALS.len()],
    ended: AtomicBool::new(false),
};

/// Registers the exit handler and the signal handlers.
pub(crate) fn install() -> Result<(), String> {
    // SAFETY: registers a plain `extern "C" fn()` to run at exit.
    if unsafe { libc::atexit(at_exit) } != 0 {
        return Err("atexit refused the exit handler".into());
    }
    for (position, &signal) in FATAL_SIGNALS.iter().enumerate() {
        // SAFETY: `action` is fully initialised before use (all zeroes is a
        // valid sigaction); the handler is an `extern "C"` function of the
        // SA_SIGINFO shape.
        let (installed, previous) = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            (libc::sigaction(signal, &action, &mut previous) == 0, previous)
        };
        if installed {
            let _ = HANDLERS.previous[position].set(previous);
        }
    }
    Ok(())
}

/// Writes everything and the end frame, once; `signal` 0 for an exit.
fn finish(signal: u32, from_signal: bool) {
    // A forked child's exit: the file, its queue and CUPTI are the parent's.
    if !crate::sink::opened_here() {
        return;
    }
    if HANDLERS.ended.swap(true, Ordering::SeqCst) {
        return;
    }
    // Kernel records first: disabling the sampler may finalise CUPTI. Its
    // last samples are then queued before the queue is written; a signal
    // handler must not wait on CUPTI's sampler.
    crate::collection::flush(true);
    if !from_signal {
        crate::pm::stop_all();
        crate::graph_events::resolve(true);
    }
    crate::sink::write_queued_now(from_signal);
    let sink = if from_signal {
        crate::sink::try_sink()
    } else {
        Some(crate::sink::sink())
    };
    if let Some(mut sink) = sink
        && let Some(writer) = sink.take()
    {
        let end = End {
            at_ns: crate::clock::now_ns(),
            signal,
            dropped: crate::records::dropped(),
        };
        if let Err(error) = writer.end(&end) {
            eprintln!("kscope profile: writing the end of this process's records: {error}");
        }
    }
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| finish(0, false));
}

extern "C" fn on_signal(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let position = FATAL_SIGNALS.iter().position(|&fatal| fatal == signal);
    let previous = position.and_then(|position| HANDLERS.previous[position].get().copied());
    let handler = previous.map_or(libc::SIG_DFL, |previous| previous.sa_sigaction);
    if handler == libc::SIG_IGN {
        return;
    }
    if handler == libc::SIG_DFL {
        // The signal will end the process: save what there is, end the file.
        // SAFETY: alarm has no preconditions.
        unsafe { libc::alarm(SIGNAL_FLUSH_SECONDS) };
        let _ = std::panic::catch_unwind(|| finish(signal as u32, true));
        // SAFETY: restores the default and raises the signal again, so the
        // process ends as the signal would have ended it.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
        return;
    }
    // The program handles it (Python turns SIGINT into KeyboardInterrupt)
    // and may go on: save what is queued, no end frame, and hand over.
    let _ = std::panic::catch_unwind(|| crate::sink::write_queued_now(true));
    let flags = previous.map_or(0, |previous| previous.sa_flags);
    // SAFETY: `handler` is the program's own handler for this signal, called
    // with the arguments of the shape its flags declare.
    unsafe {
        if flags & libc::SA_SIGINFO != 0 {
            let call: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(handler);
            call(signal, info, context);
        } else {
            let call: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
            call(signal);
        }
    }
}
