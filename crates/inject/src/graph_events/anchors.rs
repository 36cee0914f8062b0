//! Where a launch's events lie on the process's clock: anchors, events
//! recorded on an idle stream of ours and polled until done, each seen
//! complete at a known moment; a launch's start is read as the time since
//! the newest anchor taken before it.

use super::runtime::Runtime;
use super::{Event, NOT_READY, SUCCESS, Stream};

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

/// Records an event on `stream` (ours, idle) and waits, spinning, until it
/// completes: its moment on the process's clock.
///
/// # Safety
/// `stream` is ours, on the calling thread's current device.
pub(super) unsafe fn take_anchor(runtime: &Runtime, stream: Stream) -> Option<Anchor> {
    let mut event: Event = std::ptr::null_mut();
    // SAFETY: one out-parameter, then the event on our stream.
    unsafe {
        if (runtime.event_create)(&mut event) != SUCCESS || (runtime.event_record)(event, stream) != SUCCESS {
            return None;
        }
        // Our stream holds nothing else, so it completes at once; a device that never
        // gets to it must not hold the program's thread.
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(100);
        loop {
            match (runtime.event_query)(event) {
                SUCCESS => break,
                NOT_READY if std::time::Instant::now() < deadline => std::hint::spin_loop(),
                _ => return None,
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
