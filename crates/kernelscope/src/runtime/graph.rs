//! A captured graph: the dispatches and barriers an encoder recorded in
//! capture mode, replayed as a whole by [`CommandEncoder::replay`]. On the
//! CPU, replay re-queues the recorded commands; on CUDA it becomes one graph
//! launch, which removes the per-launch host cost.
//!
//! [`CommandEncoder::replay`]: super::CommandEncoder::replay

use std::sync::Arc;

use super::Device;
use super::cuda::CudaGraphCache;
use super::encoder::GraphNode;

/// A replayable recording of dispatches and barriers.
#[derive(Clone, Debug)]
pub struct Graph {
    device: Device,
    nodes: Arc<[GraphNode]>,
    /// The CUDA graph built from `nodes` on first replay (CUDA devices only).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) cuda: Arc<CudaGraphCache>,
}

impl Graph {
    pub(crate) fn new(device: Device, nodes: Vec<GraphNode>) -> Self {
        Graph {
            device,
            nodes: nodes.into(),
            cuda: Arc::default(),
        }
    }

    pub(crate) fn nodes(&self) -> &[GraphNode] {
        &self.nodes
    }

    /// The device it was captured on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Dispatches in the graph.
    pub fn dispatch_count(&self) -> usize {
        self.nodes
            .iter()
            .filter(|node| matches!(node, GraphNode::Dispatch { .. }))
            .count()
    }

    /// Barriers in the graph.
    pub fn barrier_count(&self) -> usize {
        self.nodes
            .iter()
            .filter(|node| matches!(node, GraphNode::Barrier { .. }))
            .count()
    }

    /// Dispatches that need no barrier from the one before them.
    pub fn concurrent_count(&self) -> usize {
        self.nodes
            .iter()
            .filter(|node| matches!(node, GraphNode::Dispatch { concurrent: true, .. }))
            .count()
    }
}
