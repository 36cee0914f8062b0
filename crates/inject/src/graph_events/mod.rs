//! `--graphs events`: each CUDA graph launch timed by two CUDA events the
//! library records around it, with CUPTI never attached. CUPTI's own graph
//! trace cost a PyTorch decode replaying one graph per token 3.0 % on an
//! H200 and 4.0 % on an H100 by itself, while the library loaded without
//! CUPTI cost nothing measurable (-0.3 %, H100), and a CUPTI attached with
//! nothing enabled slowed graph launches more still.
//!
//! `kscope profile` preloads the library (`LD_PRELOAD`), so that its
//! [`cudaGraphLaunch`] stands in for the CUDA runtime's: it records an
//! event before and after the real launch on the launch's stream, and the
//! flusher thread later reads each pair's times against an anchor event
//! whose moment on the process's clock it saw ([`Anchor`]). Nothing else on
//! the device is recorded (eager kernels, copies, sets), and only launches
//! made through a dynamically linked CUDA runtime are seen: a program
//! built with nvcc's default static runtime, or launching graphs through
//! the driver API, shows none.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use anchors::{ANCHOR_PERIOD_NS, Anchor, anchor_before, moment_ns, take_anchor};
use kernelscope_trace::{ApiCall, ApiWhat, Kernel, RANGE_BY_TIME};
use runtime::{Runtime, next_definition, runtime};

mod anchors;
mod runtime;

type Event = *mut c_void;
type Stream = *mut c_void;
type GraphExec = *mut c_void;
type Launch = unsafe extern "C" fn(GraphExec, Stream) -> c_int;

/// `cudaSuccess` and `cudaErrorNotReady`.
const SUCCESS: c_int = 0;
const NOT_READY: c_int = 600;

/// `cudaStreamPerThread`: stream 0 of a `_ptsz` launch.
const PER_THREAD_STREAM: usize = 2;

/// Callback ids of the launches in CUPTI's runtime list, so the calls read
/// as CUPTI's would (`cudaGraphLaunch_v10000`, `_ptsz_v10000`).
const GRAPH_LAUNCH_CALLBACK: u32 = 311;
const GRAPH_LAUNCH_PER_THREAD_CALLBACK: u32 = 312;

/// Whether graph launches are timed by events ([`crate::GRAPHS_ENV_VAR`] `events`).
pub(crate) fn timing() -> bool {
    crate::collection::graph_tracing() == crate::collection::GraphTracing::Events
}

/// A launch whose events have not been read yet.
struct Pending {
    device: c_int,
    start: Event,
    end: Event,
    /// When the launch was made, ns on the process's clock: an anchor
    /// taken before it is older than both events.
    launched_ns: u64,
    correlation: u32,
    graph: u32,
    stream: u32,
}

/// What the timing keeps between launches.
#[derive(Default)]
struct State {
    pending: Vec<Pending>,
    /// Unused events of each device.
    spare: HashMap<c_int, Vec<Event>>,
    /// Each device's anchors, oldest first, and its stream for them.
    anchors: HashMap<c_int, (Stream, Vec<Anchor>)>,
    /// Small numbers for graph executables and streams, as CUPTI's ids are.
    graphs: HashMap<usize, u32>,
    streams: HashMap<usize, u32>,
    /// Launches whose times could not be read.
    lost: u32,
}

// SAFETY: the pointers are CUDA handles (events, streams), not bound to a
// thread; each is used under the STATE lock, or by the one thread that took
// it out from under the lock (a launch's events, while the flusher reads them).
unsafe impl Send for State {}

static STATE: OnceLock<Mutex<State>> = OnceLock::new();

fn state() -> MutexGuard<'static, State> {
    STATE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

static CORRELATION: AtomicU32 = AtomicU32::new(1);

/// The CUDA runtime's `cudaGraphLaunch`, timed.
///
/// # Safety
/// As the CUDA runtime's: `exec` an instantiated graph, `stream` a stream or 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGraphLaunch(exec: GraphExec, stream: Stream) -> c_int {
    static REAL: OnceLock<Option<Launch>> = OnceLock::new();
    // SAFETY: the runtime's cudaGraphLaunch, of this signature.
    let real = REAL.get_or_init(|| {
        next_definition(c"cudaGraphLaunch").map(|f| unsafe { std::mem::transmute::<*mut c_void, Launch>(f) })
    });
    // SAFETY: as the caller promises.
    unsafe { launch_timed(*real, exec, stream, stream, GRAPH_LAUNCH_CALLBACK) }
}

/// The CUDA runtime's `cudaGraphLaunch_ptsz` (a program built with the
/// per-thread default stream), timed.
///
/// # Safety
/// As [`cudaGraphLaunch`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGraphLaunch_ptsz(exec: GraphExec, stream: Stream) -> c_int {
    static REAL: OnceLock<Option<Launch>> = OnceLock::new();
    // SAFETY: the runtime's cudaGraphLaunch_ptsz, of this signature.
    let real = REAL.get_or_init(|| {
        next_definition(c"cudaGraphLaunch_ptsz")
            .map(|f| unsafe { std::mem::transmute::<*mut c_void, Launch>(f) })
    });
    let events_stream = if stream.is_null() {
        PER_THREAD_STREAM as Stream
    } else {
        stream
    };
    // SAFETY: as the caller promises.
    unsafe {
        launch_timed(
            *real,
            exec,
            stream,
            events_stream,
            GRAPH_LAUNCH_PER_THREAD_CALLBACK,
        )
    }
}

/// `cudaErrorUnknown`: what a launch returns when the runtime's own function cannot be found.
const UNKNOWN: c_int = 999;

/// Launches through `real`, between two events on `events_stream` when
/// timing and the stream is not being captured.
///
/// # Safety
/// `exec` and `stream` as the runtime's launch takes them.
unsafe fn launch_timed(
    real: Option<Launch>,
    exec: GraphExec,
    stream: Stream,
    events_stream: Stream,
    callback: u32,
) -> c_int {
    let Some(real) = real else {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            eprintln!(
                "kscope profile: the CUDA runtime's cudaGraphLaunch is not found beside kscope's; graph launches fail"
            )
        });
        return UNKNOWN;
    };
    let runtime = match timing().then(runtime).flatten() {
        Some(runtime) => runtime,
        // SAFETY: as the caller promises.
        None => return unsafe { real(exec, stream) },
    };
    // The thread's last error is the program's to read: one our calls leave is cleared below.
    // SAFETY: reads the calling thread's last error.
    let error_before = unsafe { (runtime.peek_at_last_error)() };
    // Nothing of ours may unwind into the program: a failure leaves the launch untimed.
    // SAFETY: `events_stream` is the launch's stream.
    let started = std::panic::catch_unwind(|| unsafe { before_launch(runtime, events_stream) })
        .ok()
        .flatten();
    // SAFETY: as the caller promises.
    let result = unsafe { real(exec, stream) };
    if let Some(started) = started {
        let _ = std::panic::catch_unwind(|| {
            // SAFETY: the events are ours, of the current device.
            unsafe { after_launch(runtime, started, result, exec, events_stream, callback) }
        });
    }
    // SAFETY: reads, then clears, the calling thread's last error.
    unsafe {
        if error_before == SUCCESS && result == SUCCESS && (runtime.peek_at_last_error)() != SUCCESS {
            (runtime.get_last_error)();
        }
    }
    result
}

/// A timed launch's first event, recorded.
struct Started {
    device: c_int,
    start: Event,
    end: Event,
    launched_ns: u64,
}

/// Records the start event on `events_stream`, unless it is being
/// captured (the launch then becomes part of a graph, not work to time).
///
/// # Safety
/// `events_stream` is a stream of the calling thread's current device.
unsafe fn before_launch(runtime: &Runtime, events_stream: Stream) -> Option<Started> {
    crate::sink::ensure_open().ok()?;
    static EARLY_EXIT: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a plain `extern "C" fn()`. Registered now, after the
    // runtime started, it runs before the runtime's own exit handler, while
    // the events can still be read.
    EARLY_EXIT.call_once(|| _ = unsafe { libc::atexit(resolve_at_exit) });
    let (mut capturing, mut device): (c_int, c_int) = (0, 0);
    // SAFETY: out-parameters; the stream is the program's.
    unsafe {
        if (runtime.is_capturing)(events_stream, &mut capturing) != SUCCESS
            || capturing != 0
            || (runtime.get_device)(&mut device) != SUCCESS
        {
            return None;
        }
    }
    // SAFETY: `device` is current.
    let (start, end) = unsafe { events_for(runtime, device) }?;
    let launched_ns = crate::clock::now_ns();
    // SAFETY: our event, the program's stream.
    unsafe { (runtime.event_record)(start, events_stream) };
    Some(Started {
        device,
        start,
        end,
        launched_ns,
    })
}

/// Records the end event and queues the launch (its call at once, its
/// times when the flusher reads them).
///
/// # Safety
/// As [`before_launch`], whose events `started` holds.
unsafe fn after_launch(
    runtime: &Runtime,
    started: Started,
    result: c_int,
    exec: GraphExec,
    events_stream: Stream,
    callback: u32,
) {
    let Started {
        device,
        start,
        end,
        launched_ns,
    } = started;
    // SAFETY: our event, the program's stream.
    unsafe { (runtime.event_record)(end, events_stream) };
    let correlation = CORRELATION.fetch_add(1, Ordering::Relaxed);
    crate::sink::push_call(ApiCall {
        start_ns: launched_ns,
        end_ns: crate::clock::now_ns(),
        thread: crate::clock::thread_id(),
        range: RANGE_BY_TIME,
        correlation,
        callback,
        domain: 0,
        what: ApiWhat::GraphLaunch as u32,
    });
    let mut state = state();
    if result != SUCCESS {
        state.spare.entry(device).or_default().extend([start, end]);
        return;
    }
    let next = state.graphs.len() as u32 + 1;
    let graph = *state.graphs.entry(exec as usize).or_insert(next);
    let next = state.streams.len() as u32 + 1;
    let stream = *state.streams.entry(events_stream as usize).or_insert(next);
    state.pending.push(Pending {
        device,
        start,
        end,
        launched_ns,
        correlation,
        graph,
        stream,
    });
}

/// Two events of `device`: spare ones, or new. The device's first launch
/// also takes its first anchor and describes it.
///
/// # Safety
/// `device` is the calling thread's current device.
unsafe fn events_for(runtime: &Runtime, device: c_int) -> Option<(Event, Event)> {
    let mut state = state();
    if let std::collections::hash_map::Entry::Vacant(vacant) = state.anchors.entry(device) {
        let mut stream: Stream = std::ptr::null_mut();
        // SAFETY: one out-parameter; 1 is cudaStreamNonBlocking (no wait on the legacy stream).
        if unsafe { (runtime.stream_create)(&mut stream, 1) } != SUCCESS {
            return None;
        }
        // SAFETY: the stream is ours, on this device.
        let anchor = unsafe { take_anchor(runtime, stream) }?;
        vacant.insert((stream, vec![anchor]));
        drop(state);
        crate::callbacks::describe_device(device as u32);
        state = crate::graph_events::state();
    }
    let spare = state.spare.entry(device).or_default();
    let mut take = || {
        spare.pop().or_else(|| {
            let mut event: Event = std::ptr::null_mut();
            // SAFETY: one out-parameter; the event belongs to the current device.
            (unsafe { (runtime.event_create)(&mut event) } == SUCCESS).then_some(event)
        })
    };
    let start = take()?;
    match take() {
        Some(end) => Some((start, end)),
        None => {
            state.spare.entry(device).or_default().push(start);
            None
        }
    }
}

/// Reads the times of the launches that have ended and queues them as
/// whole-graph kernel records; `wait`: waits for every launch to end (at exit).
/// Runs on the flusher thread, and at exit.
pub(crate) fn resolve(wait: bool) {
    let Some(runtime) = timing().then(runtime).flatten() else {
        return;
    };
    // Read without the lock: the program's launches take it.
    let (pending, anchors) = {
        let mut state = state();
        let anchors: HashMap<c_int, (Stream, Vec<Anchor>)> = state.anchors.clone();
        (std::mem::take(&mut state.pending), anchors)
    };
    let (mut kept, mut spare, mut lost) = (Vec::new(), Vec::new(), 0);
    let mut current_device: Option<c_int> = None;
    for launch in pending {
        // SAFETY: the events are ours, of `launch.device`, made current on this thread first.
        let read = unsafe {
            if current_device != Some(launch.device) {
                (runtime.set_device)(launch.device);
                current_device = Some(launch.device);
            }
            if wait {
                (runtime.event_synchronize)(launch.end);
            }
            match (runtime.event_query)(launch.end) {
                NOT_READY => {
                    kept.push(launch);
                    continue;
                }
                SUCCESS => anchors
                    .get(&launch.device)
                    .and_then(|(_, anchors)| read_times(runtime, anchors, &launch)),
                _ => None,
            }
        };
        match read {
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
    // A fresh anchor for each device whose newest is old.
    let now = crate::clock::now_ns();
    let mut fresh = Vec::new();
    for (&device, (stream, device_anchors)) in &anchors {
        if device_anchors
            .last()
            .is_some_and(|anchor| now.saturating_sub(anchor.host_ns) > ANCHOR_PERIOD_NS)
        {
            // SAFETY: our stream of `device`, made current on this thread first.
            let anchor = unsafe {
                (runtime.set_device)(device);
                take_anchor(runtime, *stream)
            };
            fresh.extend(anchor.map(|anchor| (device, anchor)));
        }
    }
    let mut state = state();
    for (device, events) in spare {
        state.spare.entry(device).or_default().extend(events);
    }
    for (device, anchor) in fresh {
        if let Some((_, device_anchors)) = state.anchors.get_mut(&device) {
            device_anchors.push(anchor);
        }
    }
    state.lost += lost;
    kept.append(&mut state.pending);
    state.pending = kept;
}

/// At exit, before the CUDA runtime's own exit handler: every launch read and queued.
extern "C" fn resolve_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        resolve(true);
        crate::sink::write_queued_now(false);
    });
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

/// Launches whose times could not be read (their events failed), told in the end frame.
pub(crate) fn lost() -> u32 {
    STATE.get().map_or(0, |_| state().lost)
}

#[cfg(test)]
mod tests;
