//! Timing inside a kernel: a persistent kernel runs several of a model's
//! steps in one launch (RMSNorm, gate/up, activation quantization, down
//! projection, separated by grid-wide barriers), so the launch's record
//! alone would be one opaque row. Each block writes `%globaltimer` stamps
//! at the phase boundaries into a device buffer, and here the launch's
//! record and those stamps become one record per phase, so every table,
//! chart, gap account and comparison sees per-role, per-layer time.
//!
//! How a launch is split ([`split_into_phases`]): the stamps are read on
//! the GPU's own global timer, which has an offset of its own from the
//! profiler's clock, so only their differences are used. Let `t0` be the
//! earliest start stamp of any block. The first boundary is the record's
//! start and the last its end: the launch's span, as the dispatch clock
//! measured it, stays what it was. The boundary after phase `i` (all but
//! the last) is, where the phase ends at a grid barrier, the latest of the
//! blocks' stamps at its end (the last arrival releases the barrier, so no
//! block starts the next phase before it), and otherwise the median of
//! them (the two middle values' mean, rounded down, for an even count of
//! blocks), where blocks run on without waiting; it is placed at
//! `record.start_ns + (stamp - t0)`, then clamped between the boundary
//! before it and the record's end, so the boundaries never go back and the
//! phases tile the record's span exactly: their durations add up to the
//! launch's. A barrier phase's waiting time is the mean over blocks of how
//! long each waited there for the last one (`latest - its own stamp`).
//!
//! The phase records copy the launch's label, submission, index, kernel,
//! format, scope, stream and token (the phases of one launch share its
//! index: [`DispatchRecord::is_launch`] counts the launch once) and take
//! op kind, roles, bytes and flops from their phase's declaration (no
//! measured bytes: a DRAM count is of a whole launch, never of a phase),
//! with `in_kernel` saying which phase each is. Stamps
//! that cannot be a launch's (their count not one per phase boundary of
//! every block, a zero, a block's stamps going back) split nothing: the
//! launch keeps its one record.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::profile::{DispatchRecord, InKernelPhase, OpKind, Roles};

#[cfg(test)]
mod counting_tests;
#[cfg(test)]
mod tests;
mod totals;

pub use totals::{PhaseTotals, phase_totals};

/// One phase of a kernel that runs several of a model's steps in one
/// launch, as the kernel's op declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseMeta {
    /// The phase's name: `norm`, `gate/up`, `quantize`, `down`.
    pub name: Arc<str>,
    /// The kind of operation the phase does.
    pub op_kind: OpKind,
    /// What it does for the model.
    pub roles: Roles,
    /// Bytes it declares it moves (reads plus writes), as a dispatch does.
    pub bytes: u64,
    /// How many of those it writes.
    pub bytes_written: u64,
    /// Floating-point operations it declares.
    pub flops: u64,
    /// Whether the phase ends at a grid-wide barrier (a block's stamp at
    /// its end is then its arrival there).
    pub ends_at_grid_barrier: bool,
}

/// Where a launch's stamps are read from; the runtime implements it over
/// device memory.
pub trait StampSource: Send + Sync + std::fmt::Debug {
    /// The stamps of launch number `launch` (0, 1, 2, ... in stream
    /// order): per block, phases + 1 global-timer values in ns, `[block 0:
    /// start, end of phase 1, ..., end of phase P, block 1: ...]`. `None`
    /// where they are gone (overwritten by a later launch) or could not be
    /// read.
    fn read(&self, launch: u64) -> Option<Vec<u64>>;
}

/// What a dispatch declares of its phases, shared by every launch of it.
#[derive(Debug)]
pub struct PhasePlan {
    /// The phases, in the order the kernel runs them.
    pub phases: Vec<PhaseMeta>,
    /// How many blocks the kernel runs, each stamping every boundary.
    pub blocks: u32,
    /// Where each launch's stamps are read.
    pub source: Arc<dyn StampSource>,
    /// Launches numbered so far: the number the kernel stamps beside its
    /// slot, so that a slot a later launch overwrote is known.
    launches: AtomicU64,
}

impl PhasePlan {
    /// The plan of a kernel of `blocks` blocks running `phases`, whose
    /// stamps `source` reads; its first launch is number 0.
    pub fn new(phases: Vec<PhaseMeta>, blocks: u32, source: Arc<dyn StampSource>) -> PhasePlan {
        PhasePlan {
            phases,
            blocks,
            source,
            launches: AtomicU64::new(0),
        }
    }

    /// The number of the next launch: called once per launch enqueued,
    /// timed or not, so that the numbers follow the kernel's own count.
    pub fn next_launch(&self) -> u64 {
        self.launches.fetch_add(1, Ordering::Relaxed)
    }
}

/// A plan and the number of the launch a dispatch record is of.
#[derive(Clone, Debug)]
pub struct InKernelLaunch {
    /// The dispatch's phases and where their stamps are.
    pub plan: Arc<PhasePlan>,
    /// Which launch of it this is.
    pub launch: u64,
}

/// The median of `values` (sorted here): the middle one, or the mean of
/// the two middle ones (rounded down) for an even count. `values` is never
/// empty: there is at least one block.
fn median(values: &mut [u64]) -> u64 {
    values.sort_unstable();
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        let (low, high) = (values[middle - 1], values[middle]);
        low + (high - low) / 2
    }
}

/// Splits `record` (the whole launch, its times on the profiler's clock)
/// into one record per phase by the launch's `stamps` from its `blocks`
/// blocks (see the module's documentation); `None` where the stamps cannot
/// be the launch's, and the caller keeps the one record.
pub fn split_into_phases(
    record: &DispatchRecord,
    phases: &[PhaseMeta],
    stamps: &[u64],
    blocks: u32,
) -> Option<Vec<DispatchRecord>> {
    let count = phases.len();
    let per_block = count.checked_add(1)?;
    if blocks == 0 || count == 0 || Some(stamps.len()) != per_block.checked_mul(blocks as usize) {
        return None;
    }
    let rows: Vec<&[u64]> = stamps.chunks_exact(per_block).collect();
    let well_formed = |row: &&[u64]| row.iter().all(|&stamp| stamp > 0) && row.is_sorted();
    if !rows.iter().all(well_formed) {
        return None;
    }
    let t0 = rows.iter().map(|row| row[0]).min()?;
    let phase_count = u32::try_from(count).ok()?;
    let mut records = Vec::with_capacity(count);
    let mut start = record.start_ns;
    for (position, phase) in phases.iter().enumerate() {
        let mut ends: Vec<u64> = rows.iter().map(|row| row[position + 1]).collect();
        let latest = ends.iter().copied().max()?;
        let waiting_ns = if phase.ends_at_grid_barrier {
            let waited: u128 = ends.iter().map(|&end| u128::from(latest - end)).sum();
            u64::try_from(waited / ends.len() as u128).unwrap_or(u64::MAX)
        } else {
            0
        };
        let end = if position + 1 == count {
            record.end_ns.max(start)
        } else {
            let stamp = if phase.ends_at_grid_barrier {
                latest
            } else {
                median(&mut ends)
            };
            record
                .start_ns
                .saturating_add(stamp - t0)
                .clamp(start, record.end_ns.max(start))
        };
        records.push(DispatchRecord {
            label: record.label.clone(),
            submission: record.submission,
            index: record.index,
            kernel: record.kernel.clone(),
            format: record.format.clone(),
            op_kind: phase.op_kind,
            scope: record.scope.clone(),
            stream: record.stream,
            token: record.token,
            start_ns: start,
            end_ns: end,
            bytes: phase.bytes,
            bytes_written: phase.bytes_written,
            flops: phase.flops,
            roles: phase.roles,
            measured_bytes: 0,
            in_kernel: Some(InKernelPhase {
                phase: phase.name.clone(),
                index: u32::try_from(position).ok()?,
                phases: phase_count,
                waiting_ns,
            }),
        });
        start = end;
    }
    Some(records)
}
