//! Where dispatches sit on the device's roofline: each is memory-bound or
//! compute-bound by its arithmetic intensity (declared flops per declared
//! byte) against the ridge point (peak GFLOP/s over peak GB/s), and a group
//! of them (an op kind, a kernel, a layer) is judged against the peak that
//! bounds it. Classified dispatch by dispatch, so a layer that mixes a
//! compute-bound GEMM with memory-bound attention is called mixed rather
//! than given the class of its summed bytes and flops.

use std::collections::HashMap;

use super::aggregate::{Aggregate, FirstSeen};
use super::{Conditions, DispatchRecord};

/// What limits a dispatch, or a group of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bound {
    /// Arithmetic intensity below the ridge point, or no flops at all.
    Memory,
    /// Arithmetic intensity at or above the ridge point, or no bytes at all.
    Compute,
    /// A group with dispatches of both kinds (never a single dispatch).
    Mixed,
    /// Both bytes and flops declared, but a peak, hence the ridge point, is
    /// unknown (for a group: any of its dispatches).
    Unknown,
}

impl Bound {
    /// The report's word for it.
    pub fn name(self) -> &'static str {
        match self {
            Bound::Memory => "memory",
            Bound::Compute => "compute",
            Bound::Mixed => "mixed",
            Bound::Unknown => "?",
        }
    }
}

/// The device's two ceilings, as a profile's conditions recorded them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Roofline {
    peak_gbps: Option<f64>,
    peak_gflops: Option<f64>,
    /// Flops per byte, where both ceilings are known.
    ridge_point: Option<f64>,
}

impl Roofline {
    /// The ceilings of `conditions`.
    pub fn of(conditions: &Conditions) -> Self {
        Roofline {
            peak_gbps: conditions.peak_bandwidth_gbps,
            peak_gflops: conditions.peak_compute_gflops,
            ridge_point: conditions.ridge_point(),
        }
    }

    /// Flops per byte, where both ceilings are known.
    pub fn ridge_point(self) -> Option<f64> {
        self.ridge_point
    }

    /// One line naming both ceilings and how each was measured, or saying
    /// which is unknown and what that leaves unclassified.
    pub fn describe(self) -> String {
        let bandwidth = self.peak_gbps.map_or_else(
            || "peak bandwidth unknown (copy probe not run)".to_string(),
            |gbps| format!("peak bandwidth {gbps:.1} GB/s (copy probe)"),
        );
        let compute = self.peak_gflops.map_or_else(
            || "peak compute unknown (GEMM probe not run)".to_string(),
            |gflops| format!("peak compute {gflops:.1} GFLOP/s (bf16 GEMM probe)"),
        );
        let ridge = match self.ridge_point {
            Some(ridge) => format!("ridge point {ridge:.2} FLOP/B"),
            None => "no ridge point, so work with both bytes and flops is not classified".to_string(),
        };
        format!("roofline: {bandwidth}, {compute}; {ridge}")
    }

    /// What bounds work of `bytes` and `flops`; `None` where it declares
    /// neither. Zero flops is memory-bound and zero bytes compute-bound
    /// whatever the ridge point, so those are classified even with a peak
    /// unknown.
    pub fn bound(self, bytes: u64, flops: u64) -> Option<Bound> {
        match (bytes, flops) {
            (0, 0) => None,
            (_, 0) => Some(Bound::Memory),
            (0, _) => Some(Bound::Compute),
            (bytes, flops) => Some(match self.ridge_point {
                Some(ridge) if (flops as f64 / bytes as f64) < ridge => Bound::Memory,
                Some(_) => Bound::Compute,
                None => Bound::Unknown,
            }),
        }
    }

    /// The least time (ns) work of `bytes` and `flops` bound by `bound` can
    /// take: its bytes at peak bandwidth or its flops at peak rate. `None`
    /// where that peak is unknown.
    fn floor_ns(self, bound: Bound, bytes: u64, flops: u64) -> Option<f64> {
        match bound {
            // GB/s is bytes per ns, GFLOP/s flops per ns.
            Bound::Memory => Some(bytes as f64 / self.peak_gbps?),
            Bound::Compute => Some(flops as f64 / self.peak_gflops?),
            Bound::Mixed | Bound::Unknown => None,
        }
    }
}

/// A group's dispatches on the roofline, tallied one by one.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Placement {
    memory: u64,
    compute: u64,
    unknown: u64,
    /// The time the classified dispatches would take at their bounds.
    floor_ns: f64,
    /// Whether a classified dispatch's bounding peak was unknown.
    floor_incomplete: bool,
}

impl Placement {
    fn add(&mut self, roofline: Roofline, record: &DispatchRecord) {
        let Some(bound) = roofline.bound(record.bytes, record.flops) else {
            return;
        };
        match bound {
            Bound::Memory => self.memory += 1,
            Bound::Compute => self.compute += 1,
            Bound::Mixed | Bound::Unknown => self.unknown += 1,
        }
        match roofline.floor_ns(bound, record.bytes, record.flops) {
            Some(floor) => self.floor_ns += floor,
            None => self.floor_incomplete = true,
        }
    }

    /// What bounds the group: unknown as soon as one dispatch could not be
    /// classified; `None` where no dispatch declares anything.
    pub fn bound(&self) -> Option<Bound> {
        match (self.memory > 0, self.compute > 0) {
            _ if self.unknown > 0 => Some(Bound::Unknown),
            (true, false) => Some(Bound::Memory),
            (false, true) => Some(Bound::Compute),
            (true, true) => Some(Bound::Mixed),
            (false, false) => None,
        }
    }

    /// How close the group `row` came to its bound: `83.1% BW` (of peak
    /// bandwidth) where memory-bound, `61.0% FLOP/s` (of peak compute)
    /// where compute-bound, `72.4% roofline` (the time at the bounds over
    /// the time taken) where mixed. An unclassified group shows whichever
    /// peak is known, named so it is not taken for its bound. `-` without a
    /// figure.
    pub fn percent_of_peak(&self, roofline: Roofline, row: &Aggregate) -> String {
        let of = |achieved: Option<f64>, peak: Option<f64>, name: &str| {
            let (achieved, peak) = (achieved?, peak?);
            (peak > 0.0).then(|| format!("{:.1}% {name}", 100.0 * achieved / peak))
        };
        let of_bandwidth = || of(row.gigabytes_per_second(), roofline.peak_gbps, "BW");
        let of_compute = || of(row.gigaflops_per_second(), roofline.peak_gflops, "FLOP/s");
        let figure = match self.bound() {
            Some(Bound::Unknown) => of_bandwidth().or_else(of_compute),
            Some(Bound::Memory) => of_bandwidth(),
            Some(Bound::Compute) => of_compute(),
            Some(Bound::Mixed) if !self.floor_incomplete && row.total_ns > 0 => Some(format!(
                "{:.1}% roofline",
                100.0 * self.floor_ns / row.total_ns as f64
            )),
            Some(Bound::Mixed) | None => None,
        };
        figure.unwrap_or_else(|| "-".to_string())
    }
}

/// The placement of each group of `records` by `key`.
pub(crate) fn placements<'a>(
    records: impl IntoIterator<Item = &'a DispatchRecord>,
    roofline: Roofline,
    key: impl Fn(&DispatchRecord) -> String,
) -> HashMap<String, Placement> {
    let mut groups = FirstSeen::new();
    for record in records {
        groups
            .entry(&key(record), Placement::default)
            .add(roofline, record);
    }
    groups.into_groups().into_iter().collect()
}
