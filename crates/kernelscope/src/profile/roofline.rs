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
pub enum Bound {
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
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Roofline {
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

    /// Peak bandwidth in GB/s (the copy probe's), where measured.
    pub fn peak_bandwidth_gbps(self) -> Option<f64> {
        self.peak_gbps
    }

    /// Peak compute in GFLOP/s (the GEMM probe's), where measured.
    pub fn peak_compute_gflops(self) -> Option<f64> {
        self.peak_gflops
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

/// The figure a group's closeness to its bound is given against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peak {
    /// Achieved bandwidth over peak bandwidth.
    Bandwidth,
    /// Achieved GFLOP/s over peak GFLOP/s.
    Compute,
    /// For a mixed group: the time its dispatches would take at their own
    /// bounds over the time they took.
    Roofline,
}

impl Peak {
    /// The report's word for it (`BW`, `FLOP/s`, `roofline`).
    pub fn name(self) -> &'static str {
        match self {
            Peak::Bandwidth => "BW",
            Peak::Compute => "FLOP/s",
            Peak::Roofline => "roofline",
        }
    }
}

/// How close a group came to a peak: `percent` of `peak`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeakShare {
    /// The share, in percent (100: at the peak).
    pub percent: f64,
    /// Of what.
    pub peak: Peak,
}

/// A group's dispatches on the roofline, tallied one by one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placement {
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

    /// How close the group `row` came to its bound: of peak bandwidth
    /// where memory-bound, of peak compute where compute-bound, of the time
    /// at the bounds where mixed. An unclassified group gets whichever
    /// peak is known (its [`Peak`] says which, so it is not taken for its
    /// bound). `None` without a figure.
    pub fn share_of_peak(&self, roofline: Roofline, row: &Aggregate) -> Option<PeakShare> {
        let of = |achieved: Option<f64>, peak_value: Option<f64>, peak: Peak| {
            let (achieved, peak_value) = (achieved?, peak_value?);
            (peak_value > 0.0).then(|| PeakShare {
                percent: 100.0 * achieved / peak_value,
                peak,
            })
        };
        let of_bandwidth = || of(row.gigabytes_per_second(), roofline.peak_gbps, Peak::Bandwidth);
        let of_compute = || of(row.gigaflops_per_second(), roofline.peak_gflops, Peak::Compute);
        match self.bound() {
            Some(Bound::Unknown) => of_bandwidth().or_else(of_compute),
            Some(Bound::Memory) => of_bandwidth(),
            Some(Bound::Compute) => of_compute(),
            Some(Bound::Mixed) if !self.floor_incomplete && row.total_ns > 0 => Some(PeakShare {
                percent: 100.0 * self.floor_ns / row.total_ns as f64,
                peak: Peak::Roofline,
            }),
            Some(Bound::Mixed) | None => None,
        }
    }
}

/// The placement of each group of `records` by `key`.
pub fn placements<'a>(
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
