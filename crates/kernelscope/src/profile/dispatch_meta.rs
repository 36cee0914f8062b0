//! What the encoder knows of a dispatch before it runs (its kernel, the
//! format it reads, op kind, scope and declared cost), moved to the position a replay runs at,
//! and joined with its times into a dispatch record once they are known
//! (one record per phase, for a kernel timed inside by its stamps).

use std::sync::Arc;

use super::{DispatchRecord, InKernelLaunch, OpKind, Roles, split_into_phases};

/// What the encoder knows of a dispatch before it runs; joined with its
/// times to make a [`DispatchRecord`].
#[derive(Clone, Debug)]
pub(crate) struct DispatchMeta {
    /// The kernel's name.
    pub kernel: Arc<str>,
    /// The format its kernel declares it reads, if any.
    pub format: Option<Arc<str>>,
    /// What kind of operation it is.
    pub op_kind: OpKind,
    /// Where in the model it runs.
    pub scope: Arc<str>,
    /// Bytes it declares it moves (reads plus writes).
    pub bytes: u64,
    /// How many of those it writes.
    pub bytes_written: u64,
    /// Floating-point operations it declares.
    pub flops: u64,
    /// What it does for the model.
    pub roles: Roles,
    /// How the cost grows with the position it runs at, when it does.
    pub per_position: Option<PositionCost>,
    /// For a kernel that runs several steps in one launch and stamps their
    /// boundaries: its phases, and which launch of it this is.
    // Only CUDA runs kernels that stamp their phases: a build without it
    // may never read it.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub in_kernel: Option<InKernelLaunch>,
}

/// A cost declared at `context` positions that grows by `bytes` (read) and
/// `flops` per position (see `Dispatch::cost_per_position`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PositionCost {
    /// The positions the declared cost is for.
    pub context: u64,
    /// Bytes per position.
    pub bytes: u64,
    /// Flops per position.
    pub flops: u64,
}

impl DispatchMeta {
    /// This dispatch as run at `context` positions: its cost moved along
    /// its per-position slope, when it has one and a context is known.
    pub(crate) fn at_context(&self, context: Option<u64>) -> DispatchMeta {
        let mut meta = self.clone();
        if let (Some(slope), Some(context)) = (self.per_position, context) {
            let moved = |declared: u64, per_position: u64| {
                let delta = i128::from(context) - i128::from(slope.context);
                (i128::from(declared) + delta * i128::from(per_position)).clamp(0, i128::from(u64::MAX))
                    as u64
            };
            meta.bytes = moved(self.bytes, slope.bytes);
            meta.flops = moved(self.flops, slope.flops);
            meta.per_position = Some(PositionCost { context, ..slope });
        }
        meta
    }

    /// The record of this dispatch, run as `index` of submission
    /// `submission` (labeled `label`) from `start_ns` to `end_ns`.
    pub(crate) fn record(
        &self,
        label: &Arc<str>,
        submission: u64,
        index: u32,
        token: Option<u32>,
        start_ns: u64,
        end_ns: u64,
    ) -> DispatchRecord {
        DispatchRecord {
            label: label.clone(),
            submission,
            index,
            kernel: self.kernel.clone(),
            format: self.format.clone(),
            op_kind: self.op_kind,
            scope: self.scope.clone(),
            stream: 0,
            token,
            start_ns,
            end_ns,
            bytes: self.bytes,
            bytes_written: self.bytes_written,
            flops: self.flops,
            roles: self.roles,
            measured_bytes: 0,
            in_kernel: None,
        }
    }

    /// The records of this dispatch: one per phase where it ran phases and
    /// their stamps could be read, else the one record (see
    /// [`record`](Self::record) for the arguments).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn records(
        &self,
        label: &Arc<str>,
        submission: u64,
        index: u32,
        token: Option<u32>,
        start_ns: u64,
        end_ns: u64,
    ) -> Vec<DispatchRecord> {
        let record = self.record(label, submission, index, token, start_ns, end_ns);
        let phases = self.in_kernel.as_ref().and_then(|in_kernel| {
            let plan = &in_kernel.plan;
            let stamps = plan.source.read(in_kernel.launch)?;
            split_into_phases(&record, &plan.phases, &stamps, plan.blocks)
        });
        phases.unwrap_or_else(|| vec![record])
    }
}
