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
//!
//! Every call the library makes runs in the relaxed stream-capture mode (in
//! the default mode a `cudaEventQuery` from the flusher invalidates a
//! capture under way on another thread), and the program's last CUDA error
//! is left as it was. Each launch is read against the newest anchor taken
//! before it (a new one every 200 ms while graphs launch), and written as a
//! whole-graph kernel of context `kernelscope_trace::EVENT_TIMED_CONTEXT`
//! (CUPTI numbers contexts from 1). At exit the last pairs are read (5 s at
//! most, the rest counted lost); `cudaDeviceReset` is stood in for, to read
//! a device's launches before their events are freed; a child forked from
//! the process writes nothing. Where the runtime's own launch is not found,
//! the driver's `cuGraphLaunch` launches. kscope's
//! `tests/graph_events_stand_in.rs` runs it end to end without a GPU against
//! a stand-in runtime (`tests/programs/stand_in_cudart.c`).

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use anchors::{Anchor, take_anchor};
use kernelscope_trace::{ApiCall, ApiWhat, RANGE_BY_TIME};
use runtime::{Launch, Runtime, launch_through_driver, next_definition, real_launch, runtime};

mod anchors;
mod resolve;
mod runtime;

pub(crate) use resolve::resolve;

type Event = *mut c_void;
type Stream = *mut c_void;
type GraphExec = *mut c_void;

/// `cudaSuccess` and `cudaErrorNotReady`.
const SUCCESS: c_int = 0;
const NOT_READY: c_int = 600;

/// `cudaStreamPerThread`: stream 0 of a `_ptsz` launch.
const PER_THREAD_STREAM: usize = 2;

/// Callback ids of the launches in CUPTI's runtime list, so the calls read
/// as CUPTI's would (`cudaGraphLaunch_v10000`, `_ptsz_v10000`).
const GRAPH_LAUNCH_CALLBACK: u32 = 311;
const GRAPH_LAUNCH_PER_THREAD_CALLBACK: u32 = 312;

/// Whether graph launches are timed by events ([`crate::GRAPHS_ENV_VAR`]
/// `events`) in this process: not in a child forked from one that was (it
/// inherits our state, and its exit must not touch the parent's file). On
/// every launch: two atomic loads, no system call.
pub(crate) fn timing() -> bool {
    crate::collection::graph_tracing() == crate::collection::GraphTracing::Events && !crate::sink::inherited()
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

/// A device's stream for anchors, its anchors (oldest first) and when a
/// graph was last launched on it (no launch since the newest anchor: no
/// new one is needed).
struct DeviceAnchors {
    stream: Stream,
    anchors: Vec<Anchor>,
    last_launch_ns: u64,
}

/// What the timing keeps between launches.
#[derive(Default)]
struct State {
    pending: Vec<Pending>,
    /// Unused events of each device.
    spare: HashMap<c_int, Vec<Event>>,
    anchors: HashMap<c_int, DeviceAnchors>,
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
    crate::lock(STATE.get_or_init(Mutex::default))
}

static CORRELATION: AtomicU32 = AtomicU32::new(1);

/// The CUDA runtime's `cudaGraphLaunch`, timed.
///
/// # Safety
/// As the CUDA runtime's: `exec` an instantiated graph, `stream` a stream or 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGraphLaunch(exec: GraphExec, stream: Stream) -> c_int {
    static REAL: OnceLock<Launch> = OnceLock::new();
    let real = real_launch(c"cudaGraphLaunch", &REAL);
    // SAFETY: as the caller promises.
    unsafe { launch_timed(real, exec, stream, stream, GRAPH_LAUNCH_CALLBACK) }
}

/// The CUDA runtime's `cudaGraphLaunch_ptsz` (a program built with the
/// per-thread default stream), timed.
///
/// # Safety
/// As [`cudaGraphLaunch`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGraphLaunch_ptsz(exec: GraphExec, stream: Stream) -> c_int {
    static REAL: OnceLock<Launch> = OnceLock::new();
    let real = real_launch(c"cudaGraphLaunch_ptsz", &REAL);
    let events_stream = if stream.is_null() {
        PER_THREAD_STREAM as Stream
    } else {
        stream
    };
    // SAFETY: as the caller promises.
    unsafe {
        launch_timed(
            real,
            exec,
            stream,
            events_stream,
            GRAPH_LAUNCH_PER_THREAD_CALLBACK,
        )
    }
}

/// The CUDA runtime's `cudaDeviceReset`: the current device's launches are
/// read first, and its events and stream forgotten (the reset frees them).
///
/// # Safety
/// As the CUDA runtime's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaDeviceReset() -> c_int {
    type Reset = unsafe extern "C" fn() -> c_int;
    static REAL: OnceLock<Option<Reset>> = OnceLock::new();
    let real = *REAL.get_or_init(|| {
        // SAFETY: the runtime's cudaDeviceReset, of this signature.
        next_definition(c"cudaDeviceReset")
            .map(|function| unsafe { std::mem::transmute::<*mut c_void, Reset>(function) })
    });
    let Some(real) = real else {
        // SAFETY: as the caller promises.
        return unsafe { runtime::reset_through_driver() };
    };
    if let Some(runtime) = timing().then(runtime).flatten() {
        let _ = std::panic::catch_unwind(|| {
            let mut device: c_int = 0;
            // SAFETY: one out-parameter.
            if runtime.relaxed(|| unsafe { (runtime.get_device)(&mut device) }) == SUCCESS {
                resolve::forget_device(runtime, device);
            }
        });
    }
    // SAFETY: as the caller promises.
    unsafe { real() }
}

/// Launches through `real` (or the driver, where the runtime's own launch
/// is not found), between two events on `events_stream` when timing and
/// the stream is not being captured.
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
    // SAFETY: as the caller promises.
    let launch = || unsafe {
        match real {
            Some(real) => real(exec, stream),
            None => launch_through_driver(exec, events_stream),
        }
    };
    let runtime = match timing().then(runtime).flatten() {
        Some(runtime) => runtime,
        None => return launch(),
    };
    // The thread's last error is the program's to read: one our calls leave is cleared below.
    // SAFETY: reads the calling thread's last error.
    let error_before = unsafe { (runtime.peek_at_last_error)() };
    // Nothing of ours may unwind into the program: a failure leaves the launch untimed.
    // SAFETY: `events_stream` is the launch's stream.
    let started =
        std::panic::catch_unwind(|| runtime.relaxed(|| unsafe { before_launch(runtime, events_stream) }))
            .ok()
            .flatten();
    let result = launch();
    if let Some(started) = started {
        let _ = std::panic::catch_unwind(|| {
            // SAFETY: the events are ours, of the current device.
            runtime
                .relaxed(|| unsafe { after_launch(runtime, started, result, exec, events_stream, callback) })
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
    resolve::exit_handler_registered();
    // SAFETY: `device` is current.
    let (start, end) = unsafe { events_for(runtime, device) }?;
    let launched_ns = crate::clock::now_ns();
    // SAFETY: our event, the program's stream.
    if unsafe { (runtime.event_record)(start, events_stream) } != SUCCESS {
        state().spare.entry(device).or_default().extend([start, end]);
        return None;
    }
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
    let recorded = unsafe { (runtime.event_record)(end, events_stream) } == SUCCESS;
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
    if result != SUCCESS || !recorded {
        // A spare event keeps its last time: an end never recorded would read as an old one.
        state.lost += u32::from(result == SUCCESS);
        state.spare.entry(device).or_default().extend([start, end]);
        return;
    }
    let next = state.graphs.len() as u32 + 1;
    let graph = *state.graphs.entry(exec as usize).or_insert(next);
    let next = state.streams.len() as u32 + 1;
    let stream = *state.streams.entry(events_stream as usize).or_insert(next);
    if let Some(device) = state.anchors.get_mut(&device) {
        device.last_launch_ns = launched_ns;
    }
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
/// also makes its anchors' stream, tries its first anchor (the flusher
/// takes it if this one does not complete at once) and describes it.
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
        let anchor = unsafe { take_anchor(runtime, stream, anchors::FIRST_ANCHOR_WAIT) };
        vacant.insert(DeviceAnchors {
            stream,
            anchors: anchor.into_iter().collect(),
            last_launch_ns: 0,
        });
        drop(state);
        crate::devices::describe_device(device as u32);
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

#[cfg(test)]
mod tests;
