//! Holds the program's device work until its DRAM samplers run. A sampler
//! starts on a thread of its own once its device's context exists (inside
//! CUPTI's callback of the context's creation, starting it hung), and that
//! took 640 ms on a loaded two-GPU host: the program's first 1,881 kernels
//! ran unsampled. So while a sampler is starting, the program's launches,
//! copies, sets and synchronisations wait at their entry (CUPTI calls back
//! there: `callbacks::hold_calls_for_samplers`), for at most [`LONGEST_WAIT`].

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long the program waits for its samplers at most; past it, the work
/// runs unsampled and the profile says so (units no sample covered).
const LONGEST_WAIT: Duration = Duration::from_secs(10);

/// Samplers being started.
static STARTING: AtomicUsize = AtomicUsize::new(0);
static LOCK: Mutex<()> = Mutex::new(());
static STARTED: Condvar = Condvar::new();
/// Whether a wait past [`LONGEST_WAIT`] was said.
static TOLD: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set on the threads that start samplers: they must never wait for themselves.
    static STARTER: Cell<bool> = const { Cell::new(false) };
}

/// A sampler is about to be started (by a thread that calls [`started`]).
pub(crate) fn starting() {
    let _guard = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    STARTING.fetch_add(1, Ordering::AcqRel);
}

/// Marks the calling thread as one that starts a sampler.
pub(crate) fn starter_thread() {
    STARTER.with(|starter| starter.set(true));
}

/// A sampler started, or failed to: when none is starting any more, the
/// program's calls go on and stop calling back for it.
pub(crate) fn started() {
    let none_left = {
        let _guard = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let before = STARTING.fetch_sub(1, Ordering::AcqRel);
        STARTED.notify_all();
        before == 1
    };
    if none_left {
        crate::callbacks::hold_calls_for_samplers(false);
    }
}

/// Waits, on a program's thread at a call's entry, until no sampler is
/// starting or [`LONGEST_WAIT`] has passed.
pub(crate) fn wait() {
    if STARTING.load(Ordering::Acquire) == 0 || STARTER.with(Cell::get) {
        return;
    }
    let deadline = Instant::now() + LONGEST_WAIT;
    let mut guard = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    while STARTING.load(Ordering::Acquire) > 0 {
        let now = Instant::now();
        if now >= deadline {
            if !TOLD.swap(true, Ordering::AcqRel) {
                eprintln!(
                    "kscope profile: the DRAM sampler took over {} s to start; the program goes on, \
                     and its work until the sampler runs has no measured bytes",
                    LONGEST_WAIT.as_secs()
                );
            }
            return;
        }
        guard = STARTED
            .wait_timeout(guard, deadline - now)
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .0;
    }
}
