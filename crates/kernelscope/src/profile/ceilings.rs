//! The ceilings a run's roofline is drawn against, each with how it was
//! measured: the rate memory can be read (decode's limit: it reads weights
//! and barely writes), written, and copied; the compute rate; and, where
//! the device says, the physical limits its datasheet figures come from.
//! A kernel's floor time is its bytes read at the read ceiling plus its
//! bytes written at the write ceiling, so a kernel is judged against the
//! mix it really moves rather than against a copy (half reads, half
//! writes), which understates what reading alone can reach.

use serde::{Deserialize, Serialize};

/// One ceiling: its value (GB/s for bandwidths, GFLOP/s for compute) and
/// how it was measured, in words a reader can repeat.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ceiling {
    /// GB/s or GFLOP/s.
    pub value: f64,
    /// How it was measured (`stream_read probe: best of 5 reads of 1024 MiB,
    /// device time`).
    pub method: String,
}

impl Ceiling {
    /// A ceiling of `value` measured by `method`.
    pub fn new(value: f64, method: impl Into<String>) -> Self {
        Ceiling {
            value,
            method: method.into(),
        }
    }
}

/// Every ceiling known for a device; any may be absent (not measured, or a
/// profile written before it existed).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ceilings {
    /// The rate memory is read, GB/s of bytes read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<Ceiling>,
    /// The rate memory is written, GB/s of bytes written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<Ceiling>,
    /// The rate memory is copied, GB/s of bytes read plus written: the only
    /// ceiling profiles before schema 3 recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<Ceiling>,
    /// The measured compute rate, GFLOP/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<Ceiling>,
    /// The memory's physical limit from the device's attributes (GB/s),
    /// which no kernel reaches: shown beside the measured ceilings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_bandwidth: Option<Ceiling>,
    /// The compute units' physical limit from the device's attributes
    /// (GFLOP/s, dense bf16 on tensor cores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_compute: Option<Ceiling>,
}

/// Which figure the memory side of a roofline is drawn at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BandwidthBasis {
    /// The read ceiling (bytes read): what every profile since schema 3 uses.
    Read,
    /// The copy ceiling (bytes read plus written), all a profile written
    /// before schema 3 has.
    Copy,
}

impl BandwidthBasis {
    /// The word a report prints beside the figure.
    pub fn name(self) -> &'static str {
        match self {
            BandwidthBasis::Read => "read",
            BandwidthBasis::Copy => "copy",
        }
    }
}

impl Ceilings {
    /// The bandwidth the memory side of the roofline is drawn at (the read
    /// ceiling, else the copy ceiling of an older profile) and which it is.
    pub fn bandwidth(&self) -> Option<(f64, BandwidthBasis)> {
        drawn_bandwidth(
            self.read.as_ref().map(|read| read.value),
            self.copy.as_ref().map(|copy| copy.value),
        )
    }

    /// The bandwidth figure alone (GB/s), see [`bandwidth`](Self::bandwidth).
    pub fn bandwidth_gbps(&self) -> Option<f64> {
        self.bandwidth().map(|(gbps, _)| gbps)
    }

    /// The measured compute rate (GFLOP/s).
    pub fn compute_gflops(&self) -> Option<f64> {
        self.compute.as_ref().map(|ceiling| ceiling.value)
    }

    /// The roofline's ridge point in flops per byte: compute over the
    /// bandwidth it is drawn at. `None` unless both are known.
    pub fn ridge_point(&self) -> Option<f64> {
        match (self.compute_gflops(), self.bandwidth_gbps()) {
            (Some(gflops), Some(gbps)) if gbps > 0.0 => Some(gflops / gbps),
            _ => None,
        }
    }

    /// The least time (ns) moving `bytes` of which `bytes_written` are
    /// written can take: the reads at the read ceiling plus the writes at
    /// the write ceiling; with only a copy ceiling (an older profile), all
    /// of it at that. A write-free kernel needs no write ceiling. `None`
    /// without the ceilings to say.
    pub fn memory_floor_ns(&self, bytes: u64, bytes_written: u64) -> Option<f64> {
        let value = |ceiling: &Option<Ceiling>| ceiling.as_ref().map(|ceiling| ceiling.value);
        memory_floor_ns(
            [value(&self.read), value(&self.write), value(&self.copy)],
            bytes,
            bytes_written,
        )
    }

    /// Each ceiling present, named as in the JSON, with its unit.
    pub fn each(&self) -> impl Iterator<Item = (&'static str, &'static str, &Ceiling)> {
        [
            ("read", "GB/s", &self.read),
            ("write", "GB/s", &self.write),
            ("copy", "GB/s", &self.copy),
            ("compute", "GFLOP/s", &self.compute),
            ("physical_bandwidth", "GB/s", &self.physical_bandwidth),
            ("physical_compute", "GFLOP/s", &self.physical_compute),
        ]
        .into_iter()
        .filter_map(|(name, unit, ceiling)| ceiling.as_ref().map(|ceiling| (name, unit, ceiling)))
    }

    /// Whether every ceiling present is positive and finite; the problem,
    /// naming it, where one is not.
    pub(super) fn check(&self) -> Result<(), String> {
        for (name, unit, ceiling) in self.each() {
            if !(ceiling.value.is_finite() && ceiling.value > 0.0) {
                return Err(format!(
                    "conditions.ceilings.{name}: {} is not a positive, finite {unit}",
                    ceiling.value
                ));
            }
        }
        Ok(())
    }
}

/// [`Ceilings::bandwidth`] from the read and copy ceilings in GB/s, shared
/// with the roofline, which keeps the figures alone.
pub(super) fn drawn_bandwidth(read: Option<f64>, copy: Option<f64>) -> Option<(f64, BandwidthBasis)> {
    match (read, copy) {
        (Some(read), _) => Some((read, BandwidthBasis::Read)),
        (None, Some(copy)) => Some((copy, BandwidthBasis::Copy)),
        (None, None) => None,
    }
}

/// [`Ceilings::memory_floor_ns`] over the `[read, write, copy]` ceilings
/// in GB/s, shared with the roofline, which keeps the figures alone.
pub(super) fn memory_floor_ns(
    [read, write, copy]: [Option<f64>; 3],
    bytes: u64,
    bytes_written: u64,
) -> Option<f64> {
    let written = bytes_written.min(bytes);
    let read_bytes = bytes - written;
    // GB/s is bytes per ns.
    match (read, write, copy) {
        (Some(read), Some(write), _) => Some(read_bytes as f64 / read + written as f64 / write),
        (Some(read), None, _) if written == 0 => Some(read_bytes as f64 / read),
        (_, _, Some(copy)) => Some(bytes as f64 / copy),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(read: Option<f64>, write: Option<f64>, copy: Option<f64>) -> Ceilings {
        Ceilings {
            read: read.map(|value| Ceiling::new(value, "test")),
            write: write.map(|value| Ceiling::new(value, "test")),
            copy: copy.map(|value| Ceiling::new(value, "test")),
            ..Ceilings::default()
        }
    }

    #[test]
    fn floors_take_reads_and_writes_at_their_own_ceilings() {
        let ceilings = with(Some(4.0), Some(2.0), Some(3.0));
        // 800 bytes read at 4 B/ns and 200 written at 2 B/ns.
        assert_eq!(ceilings.memory_floor_ns(1000, 200), Some(300.0));
        // Written bytes above the total are cut to it: all written.
        assert_eq!(ceilings.memory_floor_ns(1000, 5000), Some(500.0));
        assert_eq!(ceilings.bandwidth(), Some((4.0, BandwidthBasis::Read)));
    }

    #[test]
    fn older_profiles_fall_back_to_the_copy_ceiling() {
        let older = with(None, None, Some(3.0));
        assert_eq!(older.memory_floor_ns(900, 300), Some(300.0));
        assert_eq!(older.bandwidth(), Some((3.0, BandwidthBasis::Copy)));
        // A read ceiling alone judges write-free work, and no other.
        let read_only = with(Some(4.0), None, None);
        assert_eq!(read_only.memory_floor_ns(400, 0), Some(100.0));
        assert_eq!(read_only.memory_floor_ns(400, 1), None);
        assert_eq!(Ceilings::default().memory_floor_ns(1, 0), None);
    }

    #[test]
    fn ridge_point_divides_compute_by_the_drawn_bandwidth() {
        let mut ceilings = with(Some(4.0), Some(2.0), Some(3.0));
        assert_eq!(ceilings.ridge_point(), None);
        ceilings.compute = Some(Ceiling::new(100.0, "test"));
        assert_eq!(ceilings.ridge_point(), Some(25.0));
        ceilings.write = Some(Ceiling::new(f64::NAN, "test"));
        assert!(ceilings.check().unwrap_err().contains("ceilings.write"));
    }
}
