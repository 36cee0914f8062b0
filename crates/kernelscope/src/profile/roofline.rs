//! Where dispatches sit on the device's roofline: each is memory-bound or
//! compute-bound by its arithmetic intensity (declared flops per declared
//! byte) against the ridge point (peak GFLOP/s over peak GB/s), and a group
//! of them (an op kind, a kernel, a layer) is judged against the peak that
//! bounds it. Classified dispatch by dispatch, so a layer that mixes a
//! compute-bound GEMM with memory-bound attention is called mixed rather
//! than given the class of its summed bytes and flops.

use std::collections::HashMap;

use super::aggregate::{Aggregate, FirstSeen};
use super::{BandwidthBasis, Conditions, DispatchRecord};

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

/// The device's ceilings, as a profile's conditions recorded them: the
/// bandwidths reads and writes are judged against, the compute rate, and
/// the ridge point between them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Roofline {
    read_gbps: Option<f64>,
    write_gbps: Option<f64>,
    copy_gbps: Option<f64>,
    peak_gflops: Option<f64>,
    /// Flops per byte, where both ceilings are known.
    ridge_point: Option<f64>,
}

impl Roofline {
    /// The ceilings of `conditions`.
    pub fn of(conditions: &Conditions) -> Self {
        let ceilings = &conditions.ceilings;
        let value = |ceiling: &Option<super::Ceiling>| ceiling.as_ref().map(|ceiling| ceiling.value);
        Roofline {
            read_gbps: value(&ceilings.read),
            write_gbps: value(&ceilings.write),
            copy_gbps: value(&ceilings.copy),
            peak_gflops: ceilings.compute_gflops(),
            ridge_point: ceilings.ridge_point(),
        }
    }

    /// Flops per byte, where both ceilings are known.
    pub fn ridge_point(self) -> Option<f64> {
        self.ridge_point
    }

    /// The bandwidth the memory side is drawn at (GB/s) and which ceiling
    /// it is: the read ceiling, or the copy ceiling of a profile written
    /// before schema 3.
    pub fn bandwidth(self) -> Option<(f64, BandwidthBasis)> {
        super::ceilings::drawn_bandwidth(self.read_gbps, self.copy_gbps)
    }

    /// The drawn bandwidth alone (GB/s), see [`bandwidth`](Self::bandwidth).
    pub fn peak_bandwidth_gbps(self) -> Option<f64> {
        self.bandwidth().map(|(gbps, _)| gbps)
    }

    /// Peak compute in GFLOP/s, where measured.
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

    /// The least time (ns) moving `bytes`, `bytes_written` of them written,
    /// can take (see [`Ceilings::memory_floor_ns`](super::Ceilings::memory_floor_ns)).
    pub fn memory_floor_ns(self, bytes: u64, bytes_written: u64) -> Option<f64> {
        super::ceilings::memory_floor_ns(
            [self.read_gbps, self.write_gbps, self.copy_gbps],
            bytes,
            bytes_written,
        )
    }

    /// The least time (ns) `record` bound by `bound` can take: its reads
    /// and writes at their ceilings, or its flops at peak rate. `None`
    /// where that ceiling is unknown.
    fn floor_ns(self, bound: Bound, record: &DispatchRecord) -> Option<f64> {
        match bound {
            Bound::Memory => self.memory_floor_ns(record.bytes, record.bytes_written),
            // GFLOP/s is flops per ns.
            Bound::Compute => Some(record.flops as f64 / self.peak_gflops?),
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
    /// The time every dispatch's bytes would take at the memory ceilings,
    /// whatever bounds it: the share an unclassified group is given.
    memory_floor_ns: f64,
    /// Whether a dispatch's memory floor was unknown.
    memory_floor_incomplete: bool,
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
        match roofline.floor_ns(bound, record) {
            Some(floor) => self.floor_ns += floor,
            None => self.floor_incomplete = true,
        }
        match roofline.memory_floor_ns(record.bytes, record.bytes_written) {
            Some(floor) => self.memory_floor_ns += floor,
            None => self.memory_floor_incomplete = true,
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

    /// How close the group `row` came to its bound: the time its
    /// dispatches would take at their ceilings (reads at the read ceiling,
    /// writes at the write ceiling, flops at peak compute) over the time
    /// they took, named by the bound (`BW` where memory-bound, `FLOP/s`
    /// where compute-bound, `roofline` where mixed). An unclassified group
    /// gets its bytes' share of the memory ceilings, else its flops' share
    /// of peak compute (its [`Peak`] says which, so it is not taken for its
    /// bound). `None` without a figure.
    pub fn share_of_peak(&self, roofline: Roofline, row: &Aggregate) -> Option<PeakShare> {
        if row.total_ns == 0 {
            return None;
        }
        let share = |floor_ns: f64, peak: Peak| PeakShare {
            percent: 100.0 * floor_ns / row.total_ns as f64,
            peak,
        };
        let complete = (!self.floor_incomplete).then_some(self.floor_ns);
        match self.bound()? {
            Bound::Unknown => (!self.memory_floor_incomplete && self.memory_floor_ns > 0.0)
                .then(|| share(self.memory_floor_ns, Peak::Bandwidth))
                .or_else(|| {
                    let gflops = roofline.peak_gflops.filter(|peak| *peak > 0.0)?;
                    (row.flops > 0).then(|| share(row.flops as f64 / gflops, Peak::Compute))
                }),
            Bound::Memory => complete.map(|floor| share(floor, Peak::Bandwidth)),
            Bound::Compute => complete.map(|floor| share(floor, Peak::Compute)),
            Bound::Mixed => complete.map(|floor| share(floor, Peak::Roofline)),
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
