//! CUDA graphs: a captured graph's dispatches are captured from the
//! stream into one CUDA graph (cudarc's `CudaGraph`) on its first replay,
//! and every replay is then one `cuGraphLaunch`.

use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::{CudaGraph, DriverError, result, sys};

use super::driver::driver_error;
use super::launch::{Launched, Order, cuda_kernel, launch, prepare};
use super::modules::{CudaKernel, RankCollective};
use super::state::DeviceState;
use crate::error::{Error, Result};
use crate::runtime::command::{GraphNode, Recording};

/// Launches `recording` on the stream, capturing it into a CUDA graph on
/// first use (kept with the recording, so every handle on it shares one).
/// Returns what each of its dispatches launches, in order, for CUPTI's
/// records. The caller holds the submission lock, with the context bound.
pub(crate) fn launch_recording<'a>(
    state: &Arc<DeviceState>,
    recording: &'a Recording,
) -> Result<&'a [Launched]> {
    let captured: &CapturedGraph = recording.built(|| capture(state, recording))?;
    // The communicators its collectives captured stay alive until the
    // launch is enqueued (an abort waits), and a graph whose group was
    // aborted or remade since is refused rather than run on freed ones.
    let _communicators = captured
        .collectives
        .iter()
        .map(|(collective, generation)| collective.hold_for_replay(*generation))
        .collect::<Result<Vec<_>>>()?;
    // Straight to the driver: `CudaGraph::launch` would bind the context
    // again on every replay.
    // SAFETY: an instantiated graph of this context, on our stream; its
    // collectives' communicators are held above.
    unsafe { result::graph::launch(captured.graph.cu_graph_exec(), state.stream().cu_stream()) }
        .map_err(driver_error("launching a graph"))?;
    Ok(&captured.launched)
}

/// Captures `recording` into a CUDA graph unless it already is; returns
/// whether its launch may be held at the profiler's gate (not once a launch
/// of it outran the gate, see `gate.rs`). The caller holds the submission
/// lock, with the context bound.
pub(crate) fn ensure_captured(state: &Arc<DeviceState>, recording: &Recording) -> Result<bool> {
    recording
        .built(|| capture(state, recording))
        .map(|captured: &CapturedGraph| !captured.outran_gate.load(Ordering::Relaxed))
}

/// Remembers that a launch of `recording` (captured) needed more of the
/// device's command queue than a held stream leaves: it is not held again.
pub(crate) fn mark_outran_gate(state: &Arc<DeviceState>, recording: &Recording) -> Result<()> {
    let captured: &CapturedGraph = recording.built(|| capture(state, recording))?;
    captured.outran_gate.store(true, Ordering::Relaxed);
    Ok(())
}

/// An instantiated CUDA graph and the device it belongs to, which it keeps
/// alive: it is destroyed with the device's context bound.
struct CapturedGraph {
    graph: ManuallyDrop<CudaGraph>,
    /// What each dispatch launches, in the recording's order.
    launched: Vec<Launched>,
    /// A launch of it outran the profiler's gate (see `gate.rs`).
    outran_gate: AtomicBool,
    /// One collective per communicator its collectives use, with the
    /// group's generation when captured.
    collectives: Vec<(Arc<dyn RankCollective>, u64)>,
    state: Arc<DeviceState>,
}

// SAFETY: graph handles are usable from any thread; every launch of it
// happens under the device's submission lock, so no two threads use it at once.
unsafe impl Send for CapturedGraph {}
// SAFETY: as above; the handles are only read after instantiation.
unsafe impl Sync for CapturedGraph {}

impl Drop for CapturedGraph {
    fn drop(&mut self) {
        // With the context broken the graph is left alone (leaked), as
        // destroying it could fail halfway.
        if self.state.bind().is_ok() {
            // SAFETY: dropped once, here; the field is not used after.
            unsafe { ManuallyDrop::drop(&mut self.graph) };
        }
    }
}

/// The graph's dispatches captured from the stream into a CUDA graph. The
/// caller holds the submission lock, with the context bound.
fn capture(state: &Arc<DeviceState>, graph: &Recording) -> Result<CapturedGraph> {
    // Library plans are made before the capture: making one runs host-side
    // heuristics and a capture of its own on a side stream.
    let launched = graph
        .dispatches()
        .map(|recorded| prepare(state, recorded))
        .collect::<Result<Vec<_>>>()?;
    // One per communicator: holding one twice for a replay would deadlock.
    let mut collectives: Vec<(Arc<dyn RankCollective>, u64)> = Vec::new();
    for recorded in graph.dispatches() {
        if let CudaKernel::Collective(collective) = cuda_kernel(recorded)?
            && !collectives
                .iter()
                .any(|(known, _)| known.communicator() == collective.communicator())
        {
            collectives.push((collective.clone(), collective.generation()));
        }
    }
    let stream = state.stream().stream();
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(driver_error("beginning a stream capture"))?;
    // Capture ends below on every path.
    let captured = graph.nodes.iter().try_for_each(|node| match node {
        GraphNode::Dispatch { recorded, .. } => launch(state, recorded, Order::EarlyWhereAllowed).map(drop),
        GraphNode::Barrier { .. } => Ok(()),
    });
    // Ending the capture also instantiates the graph; a graph captured from
    // launches that failed is dropped (destroyed) right away.
    let ended = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .map_err(driver_error(
            "ending a stream capture and instantiating its graph",
        ))?;
    captured?;
    let graph = ended.ok_or_else(|| Error::Cuda {
        operation: "instantiating a graph (the capture produced none)".into(),
        source: DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE),
    })?;
    Ok(CapturedGraph {
        graph: ManuallyDrop::new(graph),
        launched,
        outran_gate: AtomicBool::new(false),
        collectives,
        state: state.clone(),
    })
}
