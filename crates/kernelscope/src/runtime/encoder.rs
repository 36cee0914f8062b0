//! The command encoder: batches dispatches into one submission, places
//! barriers from declared read/write ranges, records instead of running in
//! capture mode, and commits with an optional label that the profiler's
//! per-label tables key on. Counters are bumped here, where work is issued,
//! so every backend counts the same way.

use std::sync::Arc;

use super::command::{Command, GraphNode, RecordedDispatch};
use super::{Arg, Device, Dispatch, Graph, MemRanges, OpKind};
use crate::error::{Error, Result};
use crate::profile::{Counters, DispatchMeta, InKernelLaunch, Roles};

/// The label of submissions committed without one.
pub const UNLABELED: &str = "(unlabeled)";

/// Encodes dispatches into submissions on one device.
///
/// ```
/// use kernelscope::{Device, DType, Dispatch, KernelRegistry, OpKind};
/// let device = Device::cpu();
/// let mut registry = KernelRegistry::new();
/// registry.register_cpu("fill_seven", |args| {
///     args.output::<f32>(0)?.fill(7.0);
///     Ok(())
/// });
/// let kernel = registry.kernel(&device, "fill_seven")?;
/// let buffer = device.alloc(DType::F32, &[4])?;
///
/// let mut encoder = device.command_encoder();
/// encoder.set_scope("layer.0.mlp");
/// encoder.set_op_kind(OpKind::Copy);
/// encoder.dispatch(Dispatch::new(&kernel).write(&buffer))?;
/// encoder.commit_and_wait_labeled("fill")?;
/// assert_eq!(buffer.to_vec::<f32>()?, vec![7.0; 4]);
/// # Ok::<(), kernelscope::Error>(())
/// ```
#[derive(Debug)]
pub struct CommandEncoder {
    device: Device,
    queue: Vec<Command>,
    capture: Option<Vec<GraphNode>>,
    ranges: MemRanges,
    dispatches_since_barrier: usize,
    pending_op_kind: Option<OpKind>,
    scope: Arc<str>,
    roles: Roles,
    auto_barriers: bool,
}

/// Encoders are made here rather than in `device.rs`, so that the device
/// does not depend on the encoder that depends on it.
impl Device {
    /// A new command encoder on this device's queue.
    pub fn command_encoder(&self) -> CommandEncoder {
        CommandEncoder::new(self.clone())
    }
}

impl CommandEncoder {
    fn new(device: Device) -> Self {
        CommandEncoder {
            device,
            queue: Vec::new(),
            capture: None,
            ranges: MemRanges::new(),
            dispatches_since_barrier: 0,
            pending_op_kind: None,
            scope: Arc::from(""),
            roles: Roles::NONE,
            auto_barriers: true,
        }
    }

    fn counters(&self) -> &Counters {
        self.device.profiler().counters()
    }

    /// Counts one dispatch issued (directly or by a replay).
    fn count_dispatch(&self, concurrent: bool) {
        let counters = self.counters();
        Counters::add(&counters.dispatches, 1);
        if concurrent {
            Counters::add(&counters.concurrent, 1);
        }
    }

    /// Counts one barrier issued (directly or by a replay).
    fn count_barrier(&self, automatic: bool) {
        let counters = self.counters();
        Counters::add(&counters.barriers, 1);
        if automatic {
            Counters::add(&counters.auto_barriers, 1);
        }
    }

    /// The device this encoder submits to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Turns automatic barriers from read/write ranges on (the default) or
    /// off. When off, only explicit [`memory_barrier`](Self::memory_barrier)
    /// calls order dispatches.
    pub fn set_auto_barriers(&mut self, enabled: bool) {
        self.auto_barriers = enabled;
    }

    /// Sets the scope (`layer.3.attn`) of the dispatches that follow.
    pub fn set_scope(&mut self, scope: &str) {
        if &*self.scope != scope {
            self.scope = Arc::from(scope);
        }
    }

    /// The current scope.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// Sets the roles (what they do for the model: `Role::QkvProjection`)
    /// of the dispatches that follow.
    pub fn set_roles(&mut self, roles: impl Into<Roles>) {
        self.roles = roles.into();
    }

    /// Where the next dispatch will go: a mark for
    /// [`set_roles_since`](Self::set_roles_since).
    pub fn position(&self) -> usize {
        self.capture.as_ref().map_or(self.queue.len(), Vec::len)
    }

    /// Gives `roles` to every dispatch encoded since `position` (from
    /// [`position`](Self::position)): for a fused kernel, whose roles are
    /// known only once the steps it covered are, after it was encoded.
    pub fn set_roles_since(&mut self, position: usize, roles: Roles) {
        let retag = |recorded: &mut Arc<RecordedDispatch>| {
            // A dispatch just encoded is held here alone; a shared one
            // (never, before its commit) keeps its roles.
            if let Some(recorded) = Arc::get_mut(recorded) {
                recorded.meta.roles = roles.for_kind(recorded.meta.op_kind, recorded.dispatch.roles);
            }
        };
        match &mut self.capture {
            Some(nodes) => nodes.iter_mut().skip(position).for_each(|node| {
                if let GraphNode::Dispatch { recorded, .. } = node {
                    retag(recorded);
                }
            }),
            None => self.queue.iter_mut().skip(position).for_each(|command| {
                if let Command::Dispatch(recorded) = command {
                    retag(recorded);
                }
            }),
        }
    }

    /// Tags the next dispatch with `kind` (consumed by it; later ones are
    /// `Other` again unless tagged).
    pub fn set_op_kind(&mut self, kind: OpKind) {
        self.pending_op_kind = Some(kind);
    }

    /// Whether the encoder is recording a graph.
    pub fn is_capturing(&self) -> bool {
        self.capture.is_some()
    }

    /// Dispatches not yet committed.
    pub fn pending_dispatches(&self) -> usize {
        self.queue
            .iter()
            .filter(|command| matches!(command, Command::Dispatch(_)))
            .count()
    }

    /// Checks that every buffer belongs to this device and that no written
    /// range overlaps another argument of the same dispatch.
    fn validate(&self, dispatch: &Dispatch) -> Result<()> {
        let buffers: Vec<(usize, &super::Buffer, super::Access)> = dispatch
            .args()
            .iter()
            .enumerate()
            .filter_map(|(index, arg)| match arg {
                Arg::Buffer { buffer, access } => Some((index, buffer, *access)),
                Arg::Scalar(_) => None,
            })
            .collect();
        for &(index, buffer, _) in &buffers {
            if !self.device.owns(buffer) {
                return Err(Error::DeviceMismatch {
                    context: format!("argument {index} of `{}`", dispatch.kernel().name()),
                    buffer_device: buffer.device_name().to_string(),
                    device: self.device.name().to_string(),
                });
            }
        }
        for &(written, buffer, access) in &buffers {
            if !access.writes() {
                continue;
            }
            for &(other, other_buffer, _) in &buffers {
                if other != written && buffer.address_range().overlaps(&other_buffer.address_range()) {
                    return Err(Error::Aliasing {
                        kernel: dispatch.kernel().name().to_string(),
                        written,
                        other,
                    });
                }
            }
        }
        Ok(())
    }

    /// Adds a dispatch to the open submission (or to the graph being
    /// captured). With automatic barriers on, a barrier is issued first when
    /// the dispatch conflicts with the ones since the last barrier.
    pub fn dispatch(&mut self, dispatch: Dispatch) -> Result<()> {
        self.validate(&dispatch)?;
        if self.auto_barriers {
            let (reads, writes) = dispatch.ranges();
            if self.ranges.conflicts(&reads, &writes) {
                self.issue_barrier(true);
            }
            self.ranges.add(&reads, &writes);
        }
        let concurrent = self.dispatches_since_barrier > 0;
        self.dispatches_since_barrier += 1;
        let op_kind = dispatch
            .op_kind
            .or(self.pending_op_kind.take())
            .unwrap_or_default();
        let meta = DispatchMeta {
            kernel: dispatch.kernel().shared_name(),
            format: dispatch.kernel().shared_format(),
            op_kind,
            scope: self.scope.clone(),
            roles: self.roles.for_kind(op_kind, dispatch.roles),
            bytes: dispatch.bytes,
            bytes_written: dispatch.bytes_written,
            flops: dispatch.flops,
            per_position: dispatch.per_position,
            in_kernel: dispatch
                .phases
                .clone()
                .map(|plan| InKernelLaunch { plan, launch: 0 }),
        };
        let recorded = Arc::new(RecordedDispatch { dispatch, meta });
        match &mut self.capture {
            Some(nodes) => nodes.push(GraphNode::Dispatch { recorded, concurrent }),
            None => {
                self.count_dispatch(concurrent);
                self.queue.push(Command::Dispatch(recorded));
            }
        }
        Ok(())
    }

    /// Orders every dispatch before it ahead of every dispatch after it.
    /// Issued (and counted) only when a dispatch was encoded since the last
    /// barrier; otherwise there is nothing to order.
    pub fn memory_barrier(&mut self) {
        if self.dispatches_since_barrier > 0 {
            self.issue_barrier(false);
        }
    }

    fn issue_barrier(&mut self, automatic: bool) {
        self.ranges.clear();
        self.dispatches_since_barrier = 0;
        match &mut self.capture {
            Some(nodes) => nodes.push(GraphNode::Barrier { automatic }),
            None => {
                self.count_barrier(automatic);
                self.queue.push(Command::Barrier);
            }
        }
    }

    /// Starts recording dispatches into a graph instead of running them.
    /// Uncommitted work must be committed first.
    pub fn begin_capture(&mut self) -> Result<()> {
        if self.capture.is_some() {
            return Err(Error::EncoderState("begin_capture: already capturing".into()));
        }
        if !self.queue.is_empty() {
            return Err(Error::EncoderState(
                "begin_capture: commit the pending dispatches before capturing".into(),
            ));
        }
        self.capture = Some(Vec::new());
        self.ranges.clear();
        self.dispatches_since_barrier = 0;
        Ok(())
    }

    /// Stops recording and returns the graph.
    pub fn end_capture(&mut self) -> Result<Graph> {
        let nodes = self
            .capture
            .take()
            .ok_or_else(|| Error::EncoderState("end_capture: not capturing".into()))?;
        self.ranges.clear();
        self.dispatches_since_barrier = 0;
        Ok(Graph::new(self.device.clone(), nodes))
    }

    /// Adds a replay of `graph` to the open submission. Counts one graph
    /// launch and each of its dispatches and barriers once.
    pub fn replay(&mut self, graph: &Graph) -> Result<()> {
        self.replay_with(graph, None)
    }

    /// [`replay`](Self::replay) at `context` positions: dispatches whose
    /// cost grows with the position (`Dispatch::cost_per_position`) are
    /// recorded with their cost at that context rather than at the one
    /// they were captured at.
    pub fn replay_at(&mut self, graph: &Graph, context: usize) -> Result<()> {
        self.replay_with(graph, Some(context as u64))
    }

    fn replay_with(&mut self, graph: &Graph, context: Option<u64>) -> Result<()> {
        if self.capture.is_some() {
            return Err(Error::EncoderState(
                "replay: cannot replay a graph while capturing".into(),
            ));
        }
        if !graph.device().same_device(&self.device) {
            return Err(Error::DeviceMismatch {
                context: "replay of a graph".into(),
                buffer_device: graph.device().name().to_string(),
                device: self.device.name().to_string(),
            });
        }
        Counters::add(&self.counters().graph_launches, 1);
        for node in &graph.recording().nodes {
            match node {
                GraphNode::Dispatch { concurrent, .. } => self.count_dispatch(*concurrent),
                GraphNode::Barrier { automatic } => self.count_barrier(*automatic),
            }
        }
        self.queue.push(Command::Replay {
            recording: graph.recording().clone(),
            context,
        });
        // A replay is ordered like a launch on an in-order stream: after
        // everything before it and before everything after it, with no
        // barrier of ours.
        self.ranges.clear();
        self.dispatches_since_barrier = 0;
        Ok(())
    }

    fn submit(&mut self, label: &str) -> Result<()> {
        if self.capture.is_some() {
            return Err(Error::EncoderState("commit: end the capture first".into()));
        }
        let commands = std::mem::take(&mut self.queue);
        self.ranges.clear();
        self.dispatches_since_barrier = 0;
        if commands.is_empty() {
            return Ok(());
        }
        Counters::add(&self.counters().submissions, 1);
        let label: Arc<str> = Arc::from(label);
        self.device.backend_ref().execute(&commands, &label)
    }

    /// Waits until everything committed so far has run (one host sync).
    pub fn wait(&mut self) -> Result<()> {
        Counters::add(&self.counters().syncs, 1);
        self.device.backend_ref().wait()
    }

    /// Submits the open batch without a label and without waiting.
    pub fn commit(&mut self) -> Result<()> {
        self.submit(UNLABELED)
    }

    /// Submits the open batch under `label` without waiting.
    pub fn commit_labeled(&mut self, label: &str) -> Result<()> {
        self.submit(label)
    }

    /// Submits the open batch and waits for it.
    pub fn commit_and_wait(&mut self) -> Result<()> {
        self.submit(UNLABELED)?;
        self.wait()
    }

    /// Submits the open batch under `label` and waits for it.
    pub fn commit_and_wait_labeled(&mut self, label: &str) -> Result<()> {
        self.submit(label)?;
        self.wait()
    }
}
