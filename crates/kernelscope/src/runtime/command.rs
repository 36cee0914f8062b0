//! What the encoder hands a backend: the commands of one submission, and
//! the recording a captured graph replays. Both backends consume these;
//! neither owns them.

use std::any::Any;
use std::sync::{Arc, OnceLock};

use super::Dispatch;
use crate::error::Result;
use crate::profile::DispatchMeta;

/// A dispatch with what the profiler needs to know about it.
#[derive(Debug)]
pub(crate) struct RecordedDispatch {
    pub dispatch: Dispatch,
    pub meta: DispatchMeta,
}

/// One entry of a submission's queue.
#[derive(Clone, Debug)]
pub(crate) enum Command {
    Dispatch(Arc<RecordedDispatch>),
    Barrier,
    /// A replay of a captured graph (CUDA: one graph launch), at `context`
    /// positions where the caller said (see `DispatchMeta::at_context`).
    Replay {
        recording: Arc<Recording>,
        context: Option<u64>,
    },
}

/// One node of a captured graph: the command plus what replay must count.
#[derive(Clone, Debug)]
pub(crate) enum GraphNode {
    Dispatch {
        recorded: Arc<RecordedDispatch>,
        concurrent: bool,
    },
    Barrier {
        automatic: bool,
    },
}

/// The nodes of a captured graph, and what the backend built from them on
/// first replay (a CUDA graph ready to launch), kept with the recording so
/// every handle on it shares one.
#[derive(Debug)]
pub(crate) struct Recording {
    pub nodes: Vec<GraphNode>,
    built: OnceLock<BuiltGraph>,
}

/// The backend's form of a recording, in its own type.
struct BuiltGraph(Box<dyn Any + Send + Sync>);

impl std::fmt::Debug for BuiltGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BuiltGraph")
    }
}

impl Recording {
    pub fn new(nodes: Vec<GraphNode>) -> Self {
        Recording {
            nodes,
            built: OnceLock::new(),
        }
    }

    /// The dispatches recorded, in order.
    pub fn dispatches(&self) -> impl Iterator<Item = &Arc<RecordedDispatch>> {
        self.nodes.iter().filter_map(|node| match node {
            GraphNode::Dispatch { recorded, .. } => Some(recorded),
            GraphNode::Barrier { .. } => None,
        })
    }

    /// The backend's form of this recording, built by `build` on first use.
    /// A build that fails is tried again on the next replay.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub fn built<T: Any + Send + Sync>(&self, build: impl FnOnce() -> Result<T>) -> Result<&T> {
        if self.built.get().is_none() {
            let made = build()?;
            let _ = self.built.set(BuiltGraph(Box::new(made)));
        }
        let built = self.built.get().expect("set above");
        Ok(built
            .0
            .downcast_ref::<T>()
            .expect("a recording is built by the one backend that replays it"))
    }
}
