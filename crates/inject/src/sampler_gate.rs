//! Holds the program's device work until its DRAM samplers run. A sampler
//! starts on a thread of its own once its device's context exists (inside
//! CUPTI's callback of the context's creation, starting it hung), and that
//! took 640 ms on a loaded two-GPU host: the program's first 1,881 kernels
//! ran unsampled. So while a sampler is starting, the program's launches,
//! copies, sets and synchronisations wait at their entry (CUPTI calls back
//! there: `subscriber::hold_calls_for_samplers`), for at most [`LONGEST_WAIT`].
//!
//! Uses `subscriber` and `locking`; `devices` opens the gate around a
//! sampler's start, `callbacks` waits at it.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::locking::lock;
use crate::subscriber::hold_calls_for_samplers;

/// How long the program waits for its samplers at most, from the first
/// start; past it, the gate gives up for good (said once), the work runs
/// unsampled and the profile says so (units no sample covered).
const LONGEST_WAIT: Duration = Duration::from_secs(10);

/// The gate, process-wide: the program's threads wait at it inside CUPTI's
/// callback, and the sampler threads open it.
struct Gate {
    /// Samplers being started.
    starting: AtomicUsize,
    /// When waiting ends, set by the first of the samplers now starting.
    deadline: Mutex<Option<Instant>>,
    /// Notified as each sampler started (or failed to).
    started: Condvar,
    /// Set once [`LONGEST_WAIT`] has passed: nothing waits any more.
    gave_up: AtomicBool,
}

static GATE: Gate = Gate {
    starting: AtomicUsize::new(0),
    deadline: Mutex::new(None),
    started: Condvar::new(),
    gave_up: AtomicBool::new(false),
};

thread_local! {
    /// Set on the threads that start samplers: they must never wait for themselves.
    static STARTER: Cell<bool> = const { Cell::new(false) };
}

/// A sampler is about to be started (by a thread that calls [`started`]):
/// the program's calls call back, and wait.
pub(crate) fn starting() {
    {
        let mut deadline = lock(&GATE.deadline);
        GATE.starting.fetch_add(1, Ordering::AcqRel);
        deadline.get_or_insert_with(|| Instant::now() + LONGEST_WAIT);
    }
    hold_calls_for_samplers(true);
}

/// Marks the calling thread as one that starts a sampler.
pub(crate) fn starter_thread() {
    STARTER.with(|starter| starter.set(true));
}

/// A sampler started, or failed to: when none is starting any more, the
/// program's calls go on and stop calling back for it.
pub(crate) fn started() {
    let none_left = {
        let mut deadline = lock(&GATE.deadline);
        let before = GATE.starting.fetch_sub(1, Ordering::AcqRel);
        GATE.started.notify_all();
        if before == 1 {
            *deadline = None;
        }
        before == 1
    };
    if none_left {
        hold_calls_for_samplers(false);
        // Another device's sampler may have begun starting meanwhile.
        if GATE.starting.load(Ordering::Acquire) > 0 {
            hold_calls_for_samplers(true);
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
    if GATE.starting.load(Ordering::Acquire) == 0
        || STARTER.with(Cell::get)
        || GATE.gave_up.load(Ordering::Acquire)
    {
        return;
    }
    let mut guard = lock(&GATE.deadline);
    while GATE.starting.load(Ordering::Acquire) > 0 {
        let now = Instant::now();
        let deadline = guard.unwrap_or(now);
        if now >= deadline {
            if !GATE.gave_up.swap(true, Ordering::AcqRel) {
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
        guard = GATE
            .started
            .wait_timeout(guard, deadline - now)
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .0;
    }
}
