//! Reading the launches' events: on the flusher thread every period, at
//! the program's exit (from a handler registered at its first timed launch,
//! after the runtime started, so that it runs before the runtime's own),
//! and before a `cudaDeviceReset` frees them. Each pass holds one lock, so
//! the exit's pass waits for a flusher's and the flusher then stops.
//!
//! Uses `state`, `anchors` and `runtime`, and `sink`, `clock` and `locking`
//! from outside; used by the launch (`graph_events/mod.rs`), which registers
//! the exit's pass, and through it by the flusher (`startup`) and `exit`.

use std::collections::HashMap;
use std::ffi::c_int;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use kernelscope_trace::Kernel;

use super::anchors::{ANCHOR_PERIOD_NS, ANCHOR_WAIT, Anchor, anchor_before, moment_ns, prune, take_anchor};
use super::runtime::{Event, NOT_READY, Runtime, SUCCESS, Stream, runtime};
use super::state::{Pending, state, timing};
use crate::locking::lock;

/// The passes, process-wide: the flusher, the exit handler and a
/// `cudaDeviceReset` of the program's each run one.
struct Passes {
    /// Set at exit: the flusher reads no more.
    exiting: AtomicBool,
    /// Held by each pass.
    pass: Mutex<()>,
    /// The exit's pass, registered once.
    exit_handler: Once,
}

static PASSES: Passes = Passes {
    exiting: AtomicBool::new(false),
    pass: Mutex::new(()),
    exit_handler: Once::new(),
};

/// How long a pass that must read everything (at exit, before a reset)
/// waits for launches still running; what is left is counted lost, so a
/// graph that never ends (a peer gone) cannot hold the program's exit.
const LONGEST_WAIT: Duration = Duration::from_secs(5);

/// Reads the launches that have ended and queues them as whole-graph kernel
/// records; `wait`: waits for every launch (up to [`LONGEST_WAIT`]).
pub(crate) fn resolve(wait: bool) {
    if !timing() || (!wait && PASSES.exiting.load(Ordering::Acquire)) {
        return;
    }
    let Some(runtime) = runtime() else { return };
    let _pass = lock(&PASSES.pass);
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: every handle the pass uses is ours, taken out of the state.
        runtime.relaxed(|| unsafe { pass(runtime, wait, None) })
    });
}

/// Registers the exit's pass, once: called at a timed launch, after the
/// runtime answered for its device.
pub(super) fn exit_handler_registered() {
    // SAFETY: registers a plain `extern "C" fn()`.
    PASSES
        .exit_handler
        .call_once(|| _ = unsafe { libc::atexit(resolve_at_exit) });
}

extern "C" fn resolve_at_exit() {
    if !timing() {
        // A child forked from the timed process: nothing here is its own.
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        PASSES.exiting.store(true, Ordering::Release);
        resolve(true);
        crate::sink::write_queued_now(false);
        let lost = state().lost;
        if lost > 0 {
            let _ = writeln!(
                std::io::stderr(),
                "kscope profile: {lost} graph launches of process {} could not be timed (their events failed, or had not ended {} s into its exit)",
                std::process::id(),
                LONGEST_WAIT.as_secs()
            );
        }
    });
}

/// Before `cudaDeviceReset` on `device`: its launches read (waiting for
/// them), its anchors, stream and events forgotten.
pub(super) fn forget_device(runtime: &Runtime, device: c_int) {
    let _pass = lock(&PASSES.pass);
    // SAFETY: as in `resolve`.
    runtime.relaxed(|| unsafe { pass(runtime, true, Some(device)) });
    let mut state = state();
    state.anchors.remove(&device);
    state.spare.remove(&device);
    let before = state.pending.len();
    state.pending.retain(|launch| launch.device != device);
    state.lost += (before - state.pending.len()) as u32;
}

/// One pass over the launches not yet read (only `device`'s, when given).
/// The calling thread's current device is restored after it.
///
/// # Safety
/// Called holding the passes' lock, on a thread in the relaxed capture mode.
unsafe fn pass(runtime: &Runtime, wait: bool, device: Option<c_int>) {
    let (pending, mut anchors, streams) = {
        let mut state = state();
        let (pending, others): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut state.pending)
            .into_iter()
            .partition(|launch| device.is_none_or(|device| launch.device == device));
        state.pending = others;
        let anchors: HashMap<c_int, Vec<Anchor>> = state
            .anchors
            .iter()
            .map(|(&device, anchors)| (device, anchors.anchors.clone()))
            .collect();
        let streams: Vec<(c_int, Stream, u64)> = state
            .anchors
            .iter()
            .map(|(&device, anchors)| (device, anchors.stream, anchors.last_launch_ns))
            .collect();
        (pending, anchors, streams)
    };
    // At exit the runtime may be gone already: no call unless a launch is left to read.
    if wait && pending.is_empty() {
        return;
    }
    let mut caller_device: c_int = 0;
    // SAFETY: one out-parameter.
    let restore = unsafe { (runtime.get_device)(&mut caller_device) } == SUCCESS;
    let deadline = Instant::now() + LONGEST_WAIT;
    let now = crate::clock::now_ns();
    let mut fresh: Vec<(c_int, Anchor)> = Vec::new();
    for &(device, stream, last_launch_ns) in &streams {
        let device_anchors = anchors.entry(device).or_default();
        let newest = device_anchors.last().map_or(0, |anchor| anchor.host_ns);
        let stale = now.saturating_sub(newest) > ANCHOR_PERIOD_NS && last_launch_ns > newest;
        let unread = pending.iter().any(|launch| launch.device == device);
        if (device_anchors.is_empty() && unread) || (stale && !wait) {
            // SAFETY: our stream of `device`, made current first.
            let anchor = unsafe {
                (runtime.set_device)(device);
                take_anchor(runtime, stream, ANCHOR_WAIT)
            };
            if let Some(anchor) = anchor {
                device_anchors.push(anchor);
                fresh.push((device, anchor));
            }
        }
    }
    let (mut kept, mut spare, mut lost) = (Vec::new(), Vec::new(), 0u32);
    let mut current: Option<c_int> = None;
    for launch in pending {
        if current != Some(launch.device) {
            // SAFETY: a device the program launched on.
            unsafe { (runtime.set_device)(launch.device) };
            current = Some(launch.device);
        }
        // SAFETY: the launch's end event is ours.
        let mut status = unsafe { (runtime.event_query)(launch.end) };
        while wait && status == NOT_READY && Instant::now() < deadline {
            std::thread::yield_now();
            // SAFETY: as above.
            status = unsafe { (runtime.event_query)(launch.end) };
        }
        let times = match status {
            NOT_READY if !wait => {
                kept.push(launch);
                continue;
            }
            SUCCESS => anchors
                .get(&launch.device)
                // SAFETY: both events complete, of the current device.
                .and_then(|anchors| unsafe { read_times(runtime, anchors, &launch) }),
            _ => None,
        };
        match times {
            Some((start_ns, end_ns)) => crate::sink::push_kernel(
                Kernel {
                    start_ns,
                    end_ns,
                    correlation: launch.correlation,
                    device: launch.device as u32,
                    context: kernelscope_trace::EVENT_TIMED_CONTEXT,
                    stream: launch.stream,
                    graph: launch.graph,
                    ..Kernel::default()
                },
                &kernelscope_trace::whole_graph_name(launch.graph),
            ),
            None => lost += 1,
        }
        spare.push((launch.device, [launch.start, launch.end]));
    }
    let mut destroyed: Vec<Event> = Vec::new();
    {
        let mut state = state();
        for (device, events) in spare {
            state.spare.entry(device).or_default().extend(events);
        }
        state.lost += lost;
        kept.append(&mut state.pending);
        state.pending = kept;
        let mut oldest: HashMap<c_int, u64> = HashMap::new();
        for launch in &state.pending {
            let entry = oldest.entry(launch.device).or_insert(launch.launched_ns);
            *entry = (*entry).min(launch.launched_ns);
        }
        for (device, anchor) in fresh {
            if let Some(device_anchors) = state.anchors.get_mut(&device) {
                device_anchors.anchors.push(anchor);
            }
        }
        for (device, device_anchors) in state.anchors.iter_mut() {
            destroyed.extend(prune(&mut device_anchors.anchors, oldest.get(device).copied()));
        }
    }
    for event in destroyed {
        // SAFETY: an anchor of ours that no launch still to be read needs.
        unsafe { (runtime.event_destroy)(event) };
    }
    if restore {
        // SAFETY: the device the calling thread had.
        unsafe { (runtime.set_device)(caller_device) };
    }
}

/// A finished launch's start and end on the process's clock.
///
/// # Safety
/// The launch's events are complete, on the current device.
unsafe fn read_times(runtime: &Runtime, anchors: &[Anchor], launch: &Pending) -> Option<(u64, u64)> {
    let anchor = anchor_before(anchors, launch.launched_ns)?;
    let (mut since_anchor, mut length) = (0f32, 0f32);
    // SAFETY: out-parameters; the events are complete and timed (no DISABLE_TIMING flag).
    unsafe {
        if (runtime.elapsed)(&mut since_anchor, anchor.event, launch.start) != SUCCESS
            || (runtime.elapsed)(&mut length, launch.start, launch.end) != SUCCESS
        {
            return None;
        }
    }
    let start_ns = moment_ns(anchor.host_ns, since_anchor);
    Some((
        start_ns,
        start_ns + (f64::from(length.max(0.0)) * 1e6).round() as u64,
    ))
}
