//! Holding the stream until the host has enqueued a whole submission. With
//! CUPTI on, one graph launch spends hundreds of µs on the host (CUPTI
//! instruments every node as it launches) while the device, having already
//! passed the submission's start event, idles: the event pair would charge
//! the host's enqueue to the device, and the cross-check could not tell a
//! slow host from a lying clock. A stream wait on a host-written word,
//! placed before the start event and released once the last launch and the
//! end event are enqueued, starts the submission's clock when the device can
//! begin. The device waited for the host either way, so throughput is
//! unchanged; the host's enqueue time is recorded beside the submission.
//!
//! A held stream cannot drain its command queue, and with CUPTI on a big
//! graph's launch can need more of that queue than there is: the launch
//! then waits for room the device will never make (seen with the 80-layer
//! prefill chunk graphs of llama-3-70b split over two H200s, where both
//! ranks spun inside `cuGraphLaunch` with their GPUs idle at the gate). So
//! every hold is watched: one that outlives [`HOLD_LIMIT`] is released by
//! the watchdog thread, and the caller learns the submission was not held
//! throughout (and stops holding that graph).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, DriverError, PinnedHostSlice, sys};

use super::driver::driver_error;
use crate::error::Result;

/// Why a gate could not be made (the device then goes without one).
#[derive(Debug, thiserror::Error)]
pub(crate) enum GateError {
    #[error("pinning the gate word: {0}")]
    Pin(#[source] DriverError),
    #[error("mapping the gate word: {0}")]
    Map(#[source] DriverError),
}

/// A word of pinned host memory the device can read, and the last ticket
/// handed out. Tickets only grow; the device waits for `word >= ticket` in
/// CUDA's wrap-safe sense (`(int32_t)(word - ticket) >= 0`).
pub(crate) struct Gate {
    /// Owns the word (cudarc frees it on drop, after every hold: holds
    /// borrow the gate). Only held, never read through.
    _word: PinnedHostSlice<u32>,
    /// The word's host address, taken once: cudarc's accessors synchronise
    /// an event on every call, and a release must cost nothing.
    host: *const AtomicU32,
    device: sys::CUdeviceptr,
    last_ticket: AtomicU32,
}

// SAFETY: `host` points into `word`, pinned memory owned by the gate and only
// touched through atomic operations; the device pointer is a plain address.
unsafe impl Send for Gate {}
// SAFETY: as above; tickets are handed out atomically.
unsafe impl Sync for Gate {}

impl Gate {
    /// A gate in `context` (bound by the caller).
    pub(crate) fn new(context: &Arc<CudaContext>) -> std::result::Result<Gate, GateError> {
        // SAFETY: a 4-byte pinned allocation mapped into the device's address
        // space; initialised below before the device or the host reads it.
        let mut word = unsafe { context.alloc_pinned_with_flags::<u32>(1, sys::CU_MEMHOSTALLOC_DEVICEMAP) }
            .map_err(GateError::Pin)?;
        let host = word.as_mut_ptr().map_err(GateError::Pin)? as *mut AtomicU32;
        // SAFETY: freshly allocated, 4-byte aligned, ours alone.
        unsafe { host.write(AtomicU32::new(0)) };
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: `host` was allocated with DEVICEMAP in this context. On
        // failure `word` is dropped, which frees it.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host as *mut _, 0) }
            .result()
            .map_err(GateError::Map)?;
        Ok(Gate {
            _word: word,
            host,
            device,
            last_ticket: AtomicU32::new(0),
        })
    }

    /// Makes `stream` wait, from here on, until the returned hold is
    /// released or dropped, or the watchdog lets it go after [`HOLD_LIMIT`].
    pub(crate) fn hold(&self, stream: sys::CUstream) -> Result<Hold<'_>> {
        let ticket = self.last_ticket.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let watch = Watchdog::global().arm(self.host, ticket);
        let hold = Hold {
            gate: self,
            ticket,
            watch: Some(watch),
        };
        // SAFETY: a live stream of this context and the gate's mapped word,
        // which outlives every hold (holds borrow the gate).
        unsafe {
            sys::cuStreamWaitValue32_v2(
                stream,
                self.device,
                ticket,
                sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
            )
        }
        .result()
        .map_err(driver_error(
            "holding the stream until the submission is enqueued: cuStreamWaitValue32",
        ))?;
        Ok(hold)
    }
}

/// How long a hold may last before the watchdog releases it. A graph
/// launch's host side under CUPTI took 0.3 ms (tiny model) to a few ms (an
/// 80-layer decode step); a hold ten times longer than any of those is
/// waiting for the device, not for the host.
pub(crate) const HOLD_LIMIT: Duration = Duration::from_millis(50);

/// A stream held at the gate; releasing or dropping it lets the device go
/// on, on every path (an error halfway through enqueueing must not leave
/// the stream waiting forever).
pub(crate) struct Hold<'a> {
    gate: &'a Gate,
    ticket: u32,
    /// The watchdog's entry, taken on release.
    watch: Option<Watch>,
}

impl Hold<'_> {
    /// Lets the device go on; `true` when the stream was held until now,
    /// `false` when the watchdog had already released it.
    pub(crate) fn release(mut self) -> bool {
        self.release_once()
    }

    fn release_once(&mut self) -> bool {
        let Some(watch) = self.watch.take() else {
            return true;
        };
        let held_throughout = Watchdog::global().disarm(watch);
        // SAFETY: the gate's pinned word, valid while the gate lives.
        unsafe { (*self.gate.host).store(self.ticket, Ordering::Release) };
        held_throughout
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.release_once();
    }
}

/// An armed hold's entry with the watchdog.
pub(crate) struct Watch(u64);

/// A hold the watchdog may have to release.
struct Armed {
    id: u64,
    /// The gate word's host address (a `*const AtomicU32` as an integer, so
    /// the list is `Send`); valid while the entry is listed, since a hold
    /// removes its entry before its gate can go away.
    word: usize,
    ticket: u32,
    deadline: Instant,
}

/// One thread for the whole process that releases holds outliving their
/// limit. Holds are listed in arming order, so the first has the earliest
/// deadline; the thread sleeps until it (or until one is armed).
pub(crate) struct Watchdog {
    limit: Duration,
    armed: Mutex<Vec<Armed>>,
    wake: Condvar,
    next_id: AtomicU64,
}

impl Watchdog {
    /// The process's watchdog, with [`HOLD_LIMIT`]; its thread starts on first use.
    pub(crate) fn global() -> &'static Watchdog {
        static GLOBAL: OnceLock<&'static Watchdog> = OnceLock::new();
        GLOBAL.get_or_init(|| Watchdog::start(HOLD_LIMIT))
    }

    /// A watchdog releasing holds after `limit`, its thread running for the
    /// rest of the process (leaked: it lives as long as the thread).
    pub(crate) fn start(limit: Duration) -> &'static Watchdog {
        let watchdog: &'static Watchdog = Box::leak(Box::new(Watchdog {
            limit,
            armed: Mutex::new(Vec::new()),
            wake: Condvar::new(),
            next_id: AtomicU64::new(0),
        }));
        let spawned = std::thread::Builder::new()
            .name("kscope-gate-watchdog".into())
            .spawn(move || watchdog.watch());
        if spawned.is_err() {
            // Without its thread no hold is ever released early: holds
            // then behave as before the watchdog, released by their owner.
            crate::sync::lock(&watchdog.armed).clear();
        }
        watchdog
    }

    /// Lists a hold of `word` until `ticket` is stored there.
    pub(crate) fn arm(&self, word: *const AtomicU32, ticket: u32) -> Watch {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut armed = crate::sync::lock(&self.armed);
        armed.push(Armed {
            id,
            word: word as usize,
            ticket,
            deadline: Instant::now() + self.limit,
        });
        if armed.len() == 1 {
            // The thread waits without a deadline only when nothing is armed.
            self.wake.notify_one();
        }
        Watch(id)
    }

    /// Unlists a hold; `false` when the watchdog had released it already.
    pub(crate) fn disarm(&self, watch: Watch) -> bool {
        let mut armed = crate::sync::lock(&self.armed);
        match armed.iter().position(|entry| entry.id == watch.0) {
            Some(index) => {
                armed.remove(index);
                true
            }
            None => false,
        }
    }

    fn watch(&self) {
        let mut armed = crate::sync::lock(&self.armed);
        loop {
            let now = Instant::now();
            // A hold removes its entry (under this lock) before its gate can
            // be dropped, so every listed word is live here.
            armed.retain(|entry| {
                if entry.deadline > now {
                    return true;
                }
                // SAFETY: a live gate's pinned word (see above), touched
                // only atomically.
                unsafe { (*(entry.word as *const AtomicU32)).store(entry.ticket, Ordering::Release) };
                false
            });
            armed = match armed.first().map(|entry| entry.deadline) {
                None => self
                    .wake
                    .wait(armed)
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
                Some(deadline) => {
                    self.wake
                        .wait_timeout(armed, deadline.saturating_duration_since(now))
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .0
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_released_in_time_was_held_throughout() {
        let watchdog = Watchdog::start(Duration::from_secs(60));
        let word = Box::new(AtomicU32::new(0));
        let watch = watchdog.arm(&*word, 7);
        assert!(watchdog.disarm(watch));
        // The watchdog never stored: the owner does that.
        assert_eq!(word.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_hold_outliving_its_limit_is_released_by_the_watchdog() {
        let watchdog = Watchdog::start(Duration::from_millis(20));
        let words: Vec<Box<AtomicU32>> = (0..3).map(|_| Box::new(AtomicU32::new(0))).collect();
        let tickets = [11u32, 12, 13];
        let watches: Vec<Watch> = words
            .iter()
            .zip(tickets)
            .map(|(word, ticket)| watchdog.arm(&**word, ticket))
            .collect();
        let began = Instant::now();
        while words.iter().any(|word| word.load(Ordering::Acquire) == 0) {
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "the watchdog never released the holds"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(began.elapsed() >= Duration::from_millis(15));
        for ((word, ticket), watch) in words.iter().zip(tickets).zip(watches) {
            assert_eq!(word.load(Ordering::Acquire), ticket);
            assert!(
                !watchdog.disarm(watch),
                "a released hold must say it was not held throughout"
            );
        }
    }
}
