//! What the timing keeps between a launch and the pass that reads it: the
//! launches not yet read, each device's spare events and anchors, the small
//! numbers given to graphs and streams; and whether this process times
//! graph launches at all.
//!
//! Uses `anchors` and `runtime` (their types), `settings` and `sink`; used
//! by the launch (`graph_events/mod.rs`) and `resolve`.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use kernelscope_trace::injection_settings::GraphTracing;

use super::anchors::Anchor;
use super::runtime::{Event, Stream};

/// Whether graph launches are timed by events (`KSCOPE_GRAPHS=events`) in
/// this process: not in a child forked from one that was (it inherits our
/// state, and its exit must not touch the parent's file). On every launch:
/// two loads, no system call.
pub(super) fn timing() -> bool {
    crate::settings::settings().graph_tracing() == GraphTracing::Events && !crate::sink::inherited()
}

/// A launch whose events have not been read yet.
pub(super) struct Pending {
    pub(super) device: c_int,
    pub(super) start: Event,
    pub(super) end: Event,
    /// When the launch was made, ns on the process's clock: an anchor
    /// taken before it is older than both events.
    pub(super) launched_ns: u64,
    pub(super) correlation: u32,
    pub(super) graph: u32,
    pub(super) stream: u32,
}

/// A device's stream for anchors, its anchors (oldest first) and when a
/// graph was last launched on it (no launch since the newest anchor: no
/// new one is needed).
pub(super) struct DeviceAnchors {
    pub(super) stream: Stream,
    pub(super) anchors: Vec<Anchor>,
    pub(super) last_launch_ns: u64,
}

/// What the timing keeps between launches.
#[derive(Default)]
pub(super) struct State {
    pub(super) pending: Vec<Pending>,
    /// Unused events of each device.
    pub(super) spare: HashMap<c_int, Vec<Event>>,
    pub(super) anchors: HashMap<c_int, DeviceAnchors>,
    /// Small numbers for graph executables and streams, as CUPTI's ids are.
    pub(super) graphs: HashMap<usize, u32>,
    pub(super) streams: HashMap<usize, u32>,
    /// Launches whose times could not be read.
    pub(super) lost: u32,
}

// SAFETY: the pointers are CUDA handles (events, streams), not bound to a
// thread; each is used under the state's lock, or by the one thread that took
// it out from under the lock (a launch's events, while the flusher reads them).
unsafe impl Send for State {}

/// The timing's state, process-wide: the stand-ins are called on the
/// program's threads with no pointer of ours, and read on the flusher's and
/// at exit.
struct Timing {
    state: Mutex<State>,
    /// The next launch's correlation id (its call and its kernel share it).
    correlation: AtomicU32,
}

static TIMING: LazyLock<Timing> = LazyLock::new(|| Timing {
    state: Mutex::default(),
    correlation: AtomicU32::new(1),
});

/// The state, locked.
pub(super) fn state() -> MutexGuard<'static, State> {
    crate::locking::lock(&TIMING.state)
}

/// A correlation id for the next launch.
pub(super) fn next_correlation() -> u32 {
    TIMING.correlation.fetch_add(1, Ordering::Relaxed)
}
