//! What the library keeps about each of the program's threads, asked on
//! every launch and so kept in thread-locals: its kernel id (a system call
//! to learn, so asked once) and its innermost open NVTX push/pop range
//! (written by `nvtx`, read by `callbacks` for each API call it records).
//!
//! A foundation: uses no other module of the library.

use std::cell::Cell;
use std::sync::Once;

thread_local! {
    /// The thread's id once asked (0: not yet, or forked since).
    static THREAD_ID: Cell<u64> = const { Cell::new(0) };
    /// The innermost push/pop range's id (0: none).
    static CURRENT_RANGE: Cell<u64> = const { Cell::new(0) };
}

/// The calling thread's kernel id (what `top -H` shows), asked once per thread.
pub(crate) fn thread_id() -> u64 {
    THREAD_ID.with(|thread| {
        if thread.get() == 0 {
            static FORGET_AT_FORK: Once = Once::new();
            // SAFETY: registers a plain `extern "C" fn()` that only clears a
            // thread-local; without it a forked child's records would name
            // its parent's thread.
            FORGET_AT_FORK.call_once(|| _ = unsafe { libc::pthread_atfork(None, None, Some(forked)) });
            // SAFETY: gettid has no preconditions.
            thread.set(unsafe { libc::gettid() } as u64);
        }
        thread.get()
    })
}

/// In a forked child, on its one thread, whose cached id is its parent's.
extern "C" fn forked() {
    THREAD_ID.with(|thread| thread.set(0));
}

/// The innermost NVTX push/pop range open on the calling thread (0: none):
/// one load, asked per kernel launch.
pub(crate) fn current_range() -> u64 {
    CURRENT_RANGE.get()
}

/// Sets the calling thread's innermost push/pop range (0: none).
pub(crate) fn set_current_range(id: u64) {
    CURRENT_RANGE.set(id);
}
