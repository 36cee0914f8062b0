//! The phases of the kernels timed inside them, summed over a set of
//! records: per kernel and phase, its launches, its time and its share of
//! the launches' time, and how long its blocks waited at the grid barrier
//! that ends it. What the report's table of phases shows.

use crate::profile::DispatchRecord;
use crate::profile::aggregate::{FirstSeen, Launches};

/// One phase of a kernel, over the records it was summed from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PhaseTotals {
    /// The kernel's name.
    pub kernel: String,
    /// The phase's name.
    pub phase: String,
    /// Its position among the kernel's phases, from 0.
    pub index: u32,
    /// How many launches it ran in.
    pub launches: u64,
    /// Its time, summed over them (ns).
    pub total_ns: u64,
    /// The time of every phase of the kernel, summed: what its share is of.
    pub kernel_ns: u64,
    /// The mean wait of a block at the barrier ending it, summed over the
    /// launches (ns; 0 where it ends at none).
    pub waiting_ns: u64,
}

impl PhaseTotals {
    /// Its share of the kernel's time, 0 where the kernel took none.
    pub fn share_of_kernel(&self) -> f64 {
        if self.kernel_ns == 0 {
            0.0
        } else {
            self.total_ns as f64 / self.kernel_ns as f64
        }
    }

    /// The share of its time its blocks spent waiting at its barrier.
    pub fn waiting_share(&self) -> f64 {
        if self.total_ns == 0 {
            0.0
        } else {
            self.waiting_ns as f64 / self.total_ns as f64
        }
    }
}

/// The phases of `records`' kernels timed inside them: kernels in the
/// order they first appear, each kernel's phases in the order it runs
/// them. Empty where no record is a phase.
pub fn phase_totals<'a>(records: impl IntoIterator<Item = &'a DispatchRecord>) -> Vec<PhaseTotals> {
    // A kernel's phases are found under one key each: the kernel's name and
    // the phase's place and name (two ops may give one kernel other phases).
    let mut groups: FirstSeen<(PhaseTotals, Launches)> = FirstSeen::new();
    for record in records {
        let Some(phase) = &record.in_kernel else {
            continue;
        };
        let key = format!("{}\u{0}{}\u{0}{}", record.kernel, phase.index, phase.phase);
        let (totals, launches) = groups.entry(&key, || {
            let totals = PhaseTotals {
                kernel: record.kernel.to_string(),
                phase: phase.phase.to_string(),
                index: phase.index,
                ..PhaseTotals::default()
            };
            (totals, Launches::default())
        });
        launches.add(record);
        totals.launches = launches.count;
        // Saturating: see `aggregate`.
        totals.total_ns = totals.total_ns.saturating_add(record.duration_ns());
        totals.waiting_ns = totals.waiting_ns.saturating_add(phase.waiting_ns);
    }
    let mut rows: Vec<PhaseTotals> = groups
        .into_groups()
        .into_iter()
        .map(|(_, (totals, _))| totals)
        .collect();
    let mut kernels: Vec<(String, u64)> = Vec::new();
    for row in &rows {
        match kernels.iter_mut().find(|(kernel, _)| *kernel == row.kernel) {
            Some((_, total)) => *total = total.saturating_add(row.total_ns),
            None => kernels.push((row.kernel.clone(), row.total_ns)),
        }
    }
    for row in &mut rows {
        row.kernel_ns = kernels
            .iter()
            .find(|(kernel, _)| *kernel == row.kernel)
            .map_or(0, |(_, total)| *total);
    }
    // Stable: kernels keep their first appearance, phases take their order.
    let place = |row: &PhaseTotals| kernels.iter().position(|(kernel, _)| *kernel == row.kernel);
    rows.sort_by_key(|row| (place(row), row.index));
    rows
}
