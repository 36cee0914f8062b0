//! CUDA graphs: a captured graph's dispatches are captured from the
//! stream into one CUDA graph (cudarc's `CudaGraph`) on its first replay,
//! and every replay is then one `cuGraphLaunch`.

use std::mem::ManuallyDrop;
use std::sync::Arc;

use cudarc::driver::{CudaGraph, DriverError, result, sys};

use super::driver::driver_error;
use super::launch::launch;
use super::state::DeviceState;
use crate::error::{Error, Result};
use crate::runtime::command::{GraphNode, Recording};

/// Launches `recording` on the stream, capturing it into a CUDA graph on
/// first use (kept with the recording, so every handle on it shares one).
/// The caller holds the submission lock, with the context bound.
pub(crate) fn launch_recording(state: &Arc<DeviceState>, recording: &Recording) -> Result<()> {
    let captured: &CapturedGraph = recording.built(|| capture(state, recording))?;
    // Straight to the driver: `CudaGraph::launch` would bind the context
    // again on every replay.
    // SAFETY: an instantiated graph of this context, on our stream.
    unsafe { result::graph::launch(captured.graph.cu_graph_exec(), state.stream().cu_stream()) }
        .map_err(driver_error("launching a graph"))
}

/// An instantiated CUDA graph and the device it belongs to, which it keeps
/// alive: it is destroyed with the device's context bound.
struct CapturedGraph {
    graph: ManuallyDrop<CudaGraph>,
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
    let stream = state.stream().stream();
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(driver_error("beginning a stream capture"))?;
    // Capture ends below on every path.
    let launched = graph.nodes.iter().try_for_each(|node| match node {
        GraphNode::Dispatch { recorded, .. } => launch(state, recorded),
        GraphNode::Barrier { .. } => Ok(()),
    });
    // Ending the capture also instantiates the graph; a graph captured from
    // launches that failed is dropped (destroyed) right away.
    let ended = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .map_err(driver_error(
            "ending a stream capture and instantiating its graph",
        ))?;
    launched?;
    let graph = ended.ok_or_else(|| Error::Cuda {
        operation: "instantiating a graph (the capture produced none)".into(),
        source: DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE),
    })?;
    Ok(CapturedGraph {
        graph: ManuallyDrop::new(graph),
        state: state.clone(),
    })
}
