//! The one clock every record of the process is on: CLOCK_MONOTONIC, which
//! CUPTI is told to use too (`cuptiActivityRegisterTimestampCallback`), so
//! that NVTX ranges taken before CUDA starts, API calls and the device's
//! records line up without conversion, and processes of one host share it.

/// Now, ns on CLOCK_MONOTONIC.
pub(crate) fn now_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: one out-parameter; CLOCK_MONOTONIC always exists on Linux.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now);
    }
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// What CUPTI calls for its timestamps.
pub(crate) unsafe extern "C" fn cupti_timestamp() -> u64 {
    now_ns()
}

thread_local! {
    /// The thread's id once asked (0: not yet, or forked since): gettid is
    /// a system call, and the launch callbacks ask on every launch.
    static THREAD: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The calling thread's kernel id (what `top -H` shows), asked once per thread.
pub(crate) fn thread_id() -> u64 {
    THREAD.with(|thread| {
        if thread.get() == 0 {
            static AT_FORK: std::sync::Once = std::sync::Once::new();
            // SAFETY: registers a plain `extern "C" fn()` that only clears a
            // thread-local; without it a forked child's records would name
            // its parent's thread.
            AT_FORK.call_once(|| _ = unsafe { libc::pthread_atfork(None, None, Some(forked)) });
            // SAFETY: gettid has no preconditions.
            thread.set(unsafe { libc::gettid() } as u64);
        }
        thread.get()
    })
}

/// In a forked child, on its one thread, whose cached id is its parent's.
extern "C" fn forked() {
    THREAD.with(|thread| thread.set(0));
}
