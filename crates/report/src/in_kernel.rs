//! What the text and the HTML renderings show of kernels timed inside them
//! by the `%globaltimer` stamps they write at their phase boundaries: the
//! note that says what the mark their phase rows carry means (the mark is
//! `summary.rs`'s, where rows are named), and the table of phases (each phase's time per
//! launch, its share of the launch, and the time its blocks waited at the
//! grid barrier that ends it). A profile without such kernels shows none
//! of it.

use kernelscope::profile::{DispatchRecord, phase_totals};

use crate::summary::IN_KERNEL_MARK;
use crate::tables::{ms, us};

/// What the mark means, under a table that carries it.
pub(crate) const IN_KERNEL_NOTE: &str = "†: measured inside the kernel by %globaltimer stamps at its phase boundaries: one launch's time split into its phases (calls count the launches; each barrier's phase ends when its last block arrives).";

/// The columns of the table of phases.
pub(crate) const PHASE_COLUMNS: [&str; 7] = [
    "kernel · phase",
    "launches",
    "total ms",
    "µs per launch",
    "share of launch",
    "waiting at barrier µs",
    "waiting share",
];

/// What the table of phases shows, under it.
pub(crate) const PHASE_NOTE: &str = "waiting at barrier: per launch, the mean over the kernel's blocks of the time a block waited at the grid barrier that ends the phase for the last to arrive (the bubble, inside the phase's time); 0 where the phase ends at no barrier.";

/// Whether any of `records` (a summary's) is a phase timed inside a kernel.
pub(crate) fn has_phases(records: &[&DispatchRecord]) -> bool {
    records.iter().any(|record| record.in_kernel.is_some())
}

/// The rows of the table of phases ([`PHASE_COLUMNS`]) of `records` (a
/// summary's), kernels in the order they first ran and their phases in the
/// order they run; none where no record is a phase.
pub(crate) fn phase_cells(records: &[&DispatchRecord]) -> Vec<Vec<String>> {
    phase_totals(records.iter().copied())
        .iter()
        .map(|row| {
            let launches = row.launches.max(1) as f64;
            vec![
                format!("{} · {} {IN_KERNEL_MARK}", row.kernel, row.phase),
                row.launches.to_string(),
                ms(row.total_ns),
                us(row.total_ns as f64 / launches),
                format!("{:.1}%", 100.0 * row.share_of_kernel()),
                us(row.waiting_ns as f64 / launches),
                format!("{:.1}%", 100.0 * row.waiting_share()),
            ]
        })
        .collect()
}
