//! Where a launch's events lie on the process's clock: anchors, events
//! recorded on an idle stream of ours and polled until done, each seen
//! complete at a known moment; a launch's start is read as the time since
//! the newest anchor taken before it.
//!
//! Uses `runtime` and `clock`; used by `state`, `resolve` and the launch.

use std::time::{Duration, Instant};

use super::runtime::{Event, NOT_READY, Runtime, SUCCESS, Stream};

/// How often a new anchor is taken: an event's time is read as an f32 of
/// milliseconds from its anchor, whose step at 256 ms is 30 ns.
pub(super) const ANCHOR_PERIOD_NS: u64 = 200_000_000;

/// An event whose moment on the process's clock is known: recorded on a
/// stream of ours with nothing before it, and seen complete at `host_ns`
/// (a microsecond or so after it completed).
#[derive(Clone, Copy)]
pub(super) struct Anchor {
    pub(super) event: Event,
    pub(super) host_ns: u64,
}

/// How long the program's first launch on a device waits for its first
/// anchor; past it, the flusher takes one (the launch's start is then read
/// backwards from it).
pub(super) const FIRST_ANCHOR_WAIT: Duration = Duration::from_millis(1);

/// How long the flusher waits for an anchor.
pub(super) const ANCHOR_WAIT: Duration = Duration::from_millis(20);

/// Records an event on `stream` (ours, idle) and waits, polling, up to
/// `wait` for it to complete: its moment on the process's clock. An event
/// that does not complete in time is destroyed.
///
/// # Safety
/// `stream` is ours, on the calling thread's current device.
pub(super) unsafe fn take_anchor(runtime: &Runtime, stream: Stream, wait: Duration) -> Option<Anchor> {
    let mut event: Event = std::ptr::null_mut();
    // SAFETY: one out-parameter, then the event on our stream.
    unsafe {
        if (runtime.event_create)(&mut event) != SUCCESS || (runtime.event_record)(event, stream) != SUCCESS {
            return None;
        }
        // Our stream holds nothing else, so it completes at once; a device that never
        // gets to it must not hold the thread.
        let deadline = Instant::now() + wait;
        loop {
            match (runtime.event_query)(event) {
                SUCCESS => break,
                NOT_READY if Instant::now() < deadline => std::thread::yield_now(),
                _ => {
                    (runtime.event_destroy)(event);
                    return None;
                }
            }
        }
    }
    Some(Anchor {
        event,
        host_ns: crate::clock::now_ns(),
    })
}

/// The newest anchor taken before `launched_ns` (the first one otherwise).
pub(super) fn anchor_before(anchors: &[Anchor], launched_ns: u64) -> Option<Anchor> {
    anchors
        .iter()
        .rev()
        .find(|anchor| anchor.host_ns <= launched_ns)
        .or(anchors.first())
        .copied()
}

/// An event `elapsed_ms` after an anchor seen at `anchor_ns`, ns on the process's clock.
pub(super) fn moment_ns(anchor_ns: u64, elapsed_ms: f32) -> u64 {
    (anchor_ns as f64 + f64::from(elapsed_ms) * 1e6).max(0.0).round() as u64
}

/// Drops the anchors no launch still to be read needs: those older than the
/// newest one taken before `oldest_pending_ns` (the oldest unread launch;
/// `None`: none), keeping at least the newest. Returns the dropped events,
/// to be destroyed.
pub(super) fn prune(anchors: &mut Vec<Anchor>, oldest_pending_ns: Option<u64>) -> Vec<Event> {
    let needed_from = oldest_pending_ns.unwrap_or(u64::MAX);
    let keep_from = anchors
        .iter()
        .rposition(|anchor| anchor.host_ns <= needed_from)
        .unwrap_or(0)
        .min(anchors.len().saturating_sub(1));
    anchors.drain(..keep_from).map(|anchor| anchor.event).collect()
}
