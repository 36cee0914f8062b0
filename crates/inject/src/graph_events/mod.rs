//! `--graphs events`: each CUDA graph launch timed by two CUDA events the
//! library records around it, with CUPTI never attached. CUPTI's own graph
//! trace cost a PyTorch decode replaying one graph per token 3.0 % on an
//! H200 and 4.0 % on an H100 by itself, while the library loaded without
//! CUPTI cost nothing measurable (-0.3 %, H100), and a CUPTI attached with
//! nothing enabled slowed graph launches more still.
//!
//! `kscope profile` preloads the library (`LD_PRELOAD`), so that its
//! `cudaGraphLaunch` (an entry point in lib.rs, which calls [`launch`])
//! stands in for the CUDA runtime's: it records an
//! event before and after the real launch on the launch's stream, and the
//! flusher thread later reads each pair's times against an anchor event
//! whose moment on the process's clock it saw ([`anchors::Anchor`]). Nothing else on
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
//!
//! The files, bottom up: `runtime` (the runtime's functions and handle
//! types), `anchors` (placing events on the process's clock), `state` (what
//! is kept between a launch and its reading), `resolve` (reading the
//! launches), and this file, the launch itself. From outside it uses
//! `settings`, `sink`, `devices`, `clock`, `threads` and `locking`; lib.rs's
//! stand-ins call it, and the flusher (`startup`) and `exit` call [`resolve`].

use std::ffi::c_int;

use anchors::take_anchor;
use kernelscope_trace::{ApiCall, ApiWhat, RANGE_BY_TIME};
use runtime::{Event, GraphExec, Launch, Runtime, SUCCESS, Stream, launch_through_driver, runtime};
use state::{DeviceAnchors, Pending, state, timing};

mod anchors;
mod resolve;
mod runtime;
mod state;

pub(crate) use resolve::resolve;

/// `cudaStreamPerThread`: stream 0 of a `_ptsz` launch.
const PER_THREAD_STREAM: usize = 2;

/// Callback ids of the launches in CUPTI's runtime list, so the calls read
/// as CUPTI's would (`cudaGraphLaunch_v10000`, `_ptsz_v10000`).
const GRAPH_LAUNCH_CALLBACK: u32 = 311;
const GRAPH_LAUNCH_PER_THREAD_CALLBACK: u32 = 312;

/// Which of the runtime's graph launches is stood in for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GraphLaunch {
    /// `cudaGraphLaunch`.
    Default,
    /// `cudaGraphLaunch_ptsz`, of a program built with the per-thread
    /// default stream: its stream 0 is the thread's.
    PerThread,
}

/// The runtime's graph launch `which`, timed when this process times graph
/// launches; `open_records` opens the record file (with the flusher and the
/// exit handlers) if nothing has yet, before the first timed launch.
///
/// # Safety
/// As the CUDA runtime's: `exec` an instantiated graph, `stream` a stream or 0.
pub(crate) unsafe fn launch(
    which: GraphLaunch,
    exec: GraphExec,
    stream: Stream,
    open_records: fn() -> Result<(), String>,
) -> c_int {
    let real = runtime::real_launch(which == GraphLaunch::PerThread);
    let (events_stream, callback) = match which {
        GraphLaunch::Default => (stream, GRAPH_LAUNCH_CALLBACK),
        GraphLaunch::PerThread if stream.is_null() => {
            (PER_THREAD_STREAM as Stream, GRAPH_LAUNCH_PER_THREAD_CALLBACK)
        }
        GraphLaunch::PerThread => (stream, GRAPH_LAUNCH_PER_THREAD_CALLBACK),
    };
    // SAFETY: as the caller promises.
    unsafe { launch_timed(real, exec, stream, events_stream, callback, open_records) }
}

/// The runtime's `cudaDeviceReset`: the current device's launches are
/// read first, and its events and stream forgotten (the reset frees them).
///
/// # Safety
/// As the CUDA runtime's.
pub(crate) unsafe fn device_reset() -> c_int {
    let Some(real) = runtime::real_reset() else {
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
    open_records: fn() -> Result<(), String>,
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
    let started = std::panic::catch_unwind(|| {
        runtime.relaxed(|| unsafe { before_launch(runtime, events_stream, open_records) })
    })
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
/// captured (the launch then becomes part of a graph, not work to time) or
/// the record file will not open.
///
/// # Safety
/// `events_stream` is a stream of the calling thread's current device.
unsafe fn before_launch(
    runtime: &Runtime,
    events_stream: Stream,
    open_records: fn() -> Result<(), String>,
) -> Option<Started> {
    open_records().ok()?;
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
    let correlation = state::next_correlation();
    crate::sink::push_call(ApiCall {
        start_ns: launched_ns,
        end_ns: crate::clock::now_ns(),
        thread: crate::threads::thread_id(),
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
        state = state::state();
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
