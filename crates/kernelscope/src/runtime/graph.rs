//! A captured graph: the dispatches and barriers an encoder recorded in
//! capture mode, replayed as a whole by [`CommandEncoder::replay`]. On the
//! CPU, replay re-queues the recorded commands; on CUDA it becomes one graph
//! launch, which removes the per-launch host cost.
//!
//! [`CommandEncoder::replay`]: super::CommandEncoder::replay

use std::sync::Arc;

use super::Device;
use super::command::{GraphNode, Recording};

/// A replayable recording of dispatches and barriers.
#[derive(Clone, Debug)]
pub struct Graph {
    device: Device,
    recording: Arc<Recording>,
}

impl Graph {
    pub(crate) fn new(device: Device, nodes: Vec<GraphNode>) -> Self {
        Graph {
            device,
            recording: Arc::new(Recording::new(nodes)),
        }
    }

    pub(crate) fn recording(&self) -> &Arc<Recording> {
        &self.recording
    }

    /// The device it was captured on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Dispatches in the graph.
    pub fn dispatch_count(&self) -> usize {
        self.recording.dispatches().count()
    }

    /// Barriers in the graph.
    pub fn barrier_count(&self) -> usize {
        self.recording
            .nodes
            .iter()
            .filter(|node| matches!(node, GraphNode::Barrier { .. }))
            .count()
    }

    /// Dispatches that need no barrier from the one before them.
    pub fn concurrent_count(&self) -> usize {
        self.recording
            .nodes
            .iter()
            .filter(|node| matches!(node, GraphNode::Dispatch { concurrent: true, .. }))
            .count()
    }
}
