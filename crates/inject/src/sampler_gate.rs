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

/// How long the program waits for its samplers at most, from the first
/// start; past it, the gate gives up for good (said once), the work runs
/// unsampled and the profile says so (units no sample covered).
const LONGEST_WAIT: Duration = Duration::from_secs(10);

/// Samplers being started.
static STARTING: AtomicUsize = AtomicUsize::new(0);
/// When waiting ends, set by the first of the samplers now starting.
static LOCK: Mutex<Option<Instant>> = Mutex::new(None);
static STARTED: Condvar = Condvar::new();
/// Set once [`LONGEST_WAIT`] has passed: nothing waits any more.
static GAVE_UP: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set on the threads that start samplers: they must never wait for themselves.
    static STARTER: Cell<bool> = const { Cell::new(false) };
}

/// A sampler is about to be started (by a thread that calls [`started`]):
/// the program's calls call back, and wait.
pub(crate) fn starting() {
    {
        let mut deadline = crate::lock(&LOCK);
        STARTING.fetch_add(1, Ordering::AcqRel);
        deadline.get_or_insert_with(|| Instant::now() + LONGEST_WAIT);
    }
    crate::callbacks::hold_calls_for_samplers(true);
}

/// Marks the calling thread as one that starts a sampler.
pub(crate) fn starter_thread() {
    STARTER.with(|starter| starter.set(true));
}

/// A sampler started, or failed to: when none is starting any more, the
/// program's calls go on and stop calling back for it.
pub(crate) fn started() {
    let none_left = {
        let mut deadline = crate::lock(&LOCK);
        let before = STARTING.fetch_sub(1, Ordering::AcqRel);
        STARTED.notify_all();
        if before == 1 {
            *deadline = None;
        }
        before == 1
    };
    if none_left {
        crate::callbacks::hold_calls_for_samplers(false);
        // Another device's sampler may have begun starting meanwhile.
        if STARTING.load(Ordering::Acquire) > 0 {
            crate::callbacks::hold_calls_for_samplers(true);
        }
    }
}

/// Calls [`started`] when dropped: a starting thread that panics still lets the program go on.
pub(crate) struct StartedOnDrop;

impl Drop for StartedOnDrop {
    fn drop(&mut self) {
        started();
    }
}

/// Waits, on a program's thread at a call's entry, until no sampler is
/// starting or [`LONGEST_WAIT`] has passed.
pub(crate) fn wait() {
    if STARTING.load(Ordering::Acquire) == 0 || STARTER.with(Cell::get) || GAVE_UP.load(Ordering::Acquire) {
        return;
    }
    let mut guard = crate::lock(&LOCK);
    while STARTING.load(Ordering::Acquire) > 0 {
        let now = Instant::now();
        let deadline = guard.unwrap_or(now);
        if now >= deadline {
            if !GAVE_UP.swap(true, Ordering::AcqRel) {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
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
