//! Timing inside a kernel: a persistent kernel runs several of a model's
//! steps in one launch (RMSNorm, gate/up, activation quantization, down
//! projection, separated by grid-wide barriers), so the launch's record
//! alone would be one opaque row. Each block writes `%globaltimer` stamps
//! at the phase boundaries into a device buffer, and here the launch's
//! record and those stamps become one record per phase, so every table,
//! chart, gap account and comparison sees per-role, per-layer time.
//!
//! What a launch leaves: each block's start and the end of each phase but
//! the last (whose end is the launch's own), which the host reduces over
//! the grid ([`LaunchStamps::of_rows`]) to the earliest block's start and,
//! per phase but the last, the latest block's end and the sum of every
//! block's end (u64 stamps added with wrapping; [`LaunchStamps::mean_end`]
//! takes the earliest start out again).
//!
//! How a launch is split ([`split_into_phases`]): the stamps are read on
//! the GPU's own global timer, which has an offset of its own from the
//! profiler's clock, so only their differences are used. Let `t0` be the
//! earliest start. The first boundary is the record's start and the last
//! its end: the launch's span, as the dispatch clock measured it, stays
//! what it was. The boundary after phase `i` (all but the last) is, where
//! the phase ends at a grid barrier, the latest of the blocks' stamps at
//! its end (the last arrival releases the barrier, so no block starts the
//! next phase before it), and otherwise their mean (rounded down), where
//! blocks run on without waiting; it is placed at
//! `record.start_ns + (stamp - t0)`, then clamped between the boundary
//! before it and the record's end, so the boundaries never go back and the phases tile the record's
//! span exactly: their durations add up to the launch's. A barrier phase's
//! waiting time is the mean over blocks of how long each waited there for
//! the last one (`latest - mean`); the last phase has no end stamps, so no
//! waiting time.
//!
//! The phase records copy the launch's label, submission, index, kernel,
//! format, scope, stream and token (the phases of one launch share its
//! index: [`DispatchRecord::is_launch`] counts the launch once) and take
//! op kind, roles, bytes and flops from their phase's declaration (no
//! measured bytes: a DRAM count is of a whole launch, never of a phase),
//! with `in_kernel` saying which phase each is. Stamps that cannot be a
//! launch's (another block count or phase count, a zero start, ends
//! before the start or going back from one phase to the next) split
//! nothing: the launch keeps its one record.

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
    /// order), reduced over its blocks. `None` where they are gone
    /// (overwritten by a later launch) or could not be read.
    fn read(&self, launch: u64) -> Option<LaunchStamps>;
}

/// One launch's global-timer stamps (ns) reduced over its blocks, as a
/// persistent kernel leaves them (`PhaseStamps` in ops/persistent.cuh).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchStamps {
    /// How many blocks stamped.
    pub blocks: u32,
    /// The earliest block's start.
    pub earliest_start: u64,
    /// Per phase but the last, the latest block's end.
    pub latest_ends: Vec<u64>,
    /// Per phase but the last, the sum of every block's end modulo 2^64.
    pub end_sums: Vec<u64>,
}

impl LaunchStamps {
    /// Reduces per-block stamps `[block 0: start, end of phase 1, ..., end
    /// of phase P, block 1: ...]` of `phases` phases (each block's last end,
    /// which the kernel does not stamp, only checked) as
    /// [`of_rows`](Self::of_rows) does.
    pub fn of_blocks(stamps: &[u64], phases: usize) -> Option<LaunchStamps> {
        let per_block = phases.checked_add(1)?;
        if phases == 0 || stamps.is_empty() || !stamps.len().is_multiple_of(per_block) {
            return None;
        }
        let mut rows = Vec::with_capacity(stamps.len() / per_block * phases);
        for block in stamps.chunks_exact(per_block) {
            if block[phases] < block[phases - 1] {
                return None;
            }
            rows.extend_from_slice(&block[..phases]);
        }
        Self::of_rows(&rows, phases)
    }

    /// Reduces the rows a kernel of `phases` phases stamps, `phases` values
    /// a block (its start, then the end of every phase but the last):
    /// `None` where they cannot be a launch's (no block, a count that is
    /// not a whole row a block, a zero, a block's stamps going back).
    pub fn of_rows(rows: &[u64], phases: usize) -> Option<LaunchStamps> {
        if phases == 0 || rows.is_empty() || !rows.len().is_multiple_of(phases) {
            return None;
        }
        let rows: Vec<&[u64]> = rows.chunks_exact(phases).collect();
        if !rows
            .iter()
            .all(|row| row.iter().all(|&stamp| stamp > 0) && row.is_sorted())
        {
            return None;
        }
        let column = |position: usize| rows.iter().map(move |row| row[position]);
        Some(LaunchStamps {
            blocks: u32::try_from(rows.len()).ok()?,
            earliest_start: column(0).min()?,
            latest_ends: (1..phases)
                .map(|position| column(position).max().unwrap_or(0))
                .collect(),
            end_sums: (1..phases)
                .map(|position| column(position).fold(0u64, u64::wrapping_add))
                .collect(),
        })
    }

    /// The blocks' mean end of phase `position` (not the last; rounded
    /// down): their sum
    /// less `blocks` earliest starts is small, so wrapping arithmetic
    /// recovers it exactly.
    pub fn mean_end(&self, position: usize) -> u64 {
        let blocks = u64::from(self.blocks.max(1));
        let above_start = self.end_sums[position].wrapping_sub(blocks.wrapping_mul(self.earliest_start));
        self.earliest_start + above_start / blocks
    }

    /// Whether these can be the stamps of a launch of `blocks` blocks
    /// running `phases` phases: that count of both, a start, and per phase
    /// but the last a mean and a latest end from the start on, neither
    /// going back.
    fn fits(&self, blocks: u32, phases: usize) -> bool {
        if self.blocks != blocks || blocks == 0 || self.earliest_start == 0 || phases == 0 {
            return false;
        }
        let ends = phases - 1;
        if self.latest_ends.len() != ends || self.end_sums.len() != ends {
            return false;
        }
        let last = self.latest_ends.last().copied().unwrap_or(self.earliest_start);
        let spread = u64::from(blocks).checked_mul(last.saturating_sub(self.earliest_start));
        let mut before = (self.earliest_start, self.earliest_start);
        (0..ends).all(|position| {
            let above_start =
                self.end_sums[position].wrapping_sub(u64::from(blocks).wrapping_mul(self.earliest_start));
            let (mean, latest) = (self.mean_end(position), self.latest_ends[position]);
            let fits = spread.is_some_and(|spread| above_start <= spread)
                && before.0 <= mean
                && mean <= latest
                && before.1 <= latest;
            before = (mean, latest);
            fits
        })
    }
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

/// Splits `record` (the whole launch, its times on the profiler's clock)
/// into one record per phase by the launch's `stamps` from its `blocks`
/// blocks (see the module's documentation); `None` where the stamps cannot
/// be the launch's, and the caller keeps the one record.
pub fn split_into_phases(
    record: &DispatchRecord,
    phases: &[PhaseMeta],
    stamps: &LaunchStamps,
    blocks: u32,
) -> Option<Vec<DispatchRecord>> {
    let count = phases.len();
    if !stamps.fits(blocks, count) {
        return None;
    }
    let t0 = stamps.earliest_start;
    let phase_count = u32::try_from(count).ok()?;
    let mut records = Vec::with_capacity(count);
    let mut start = record.start_ns;
    for (position, phase) in phases.iter().enumerate() {
        // The last phase's end is the launch's own: it has no stamps.
        let last = position + 1 == count;
        let (latest, mean) = if last {
            (0, 0)
        } else {
            (stamps.latest_ends[position], stamps.mean_end(position))
        };
        let waiting_ns = if phase.ends_at_grid_barrier && !last {
            latest - mean
        } else {
            0
        };
        let end = if last {
            record.end_ns.max(start)
        } else {
            let stamp = if phase.ends_at_grid_barrier { latest } else { mean };
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
