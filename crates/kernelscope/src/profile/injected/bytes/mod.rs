//! DRAM bytes per kernel, measured: the injection library samples each
//! device's DRAM read and write counters every few microseconds (CUPTI's
//! PM sampling), and each sample's bytes are handed to the units (kernels,
//! copies, sets) that ran on its device during it.
//!
//! How a sample's bytes are split among its units: by the time each ran
//! inside it (not by the sample's length: a sample that spans the end of
//! one kernel, an idle gap and the start of the next holds almost no
//! traffic from the gap, so dividing by its length would lose 4 % of a
//! 1 GiB copy kernel's bytes at 100 µs samples, measured on an H100),
//! weighted by how fast each unit's kind moves bytes, learnt from the whole
//! run ([`attribute`]). On an H200 a 1B model's mat-vecs last less than a
//! usable sample (samples every 10 µs were lost): split by time alone, a
//! norm or rope kernel beside a mat-vec took much of its traffic.
//! Counters are device-wide: units of two streams that run together share
//! their samples' bytes, and so are flagged; a unit shorter than two
//! samples is flagged as low confidence. Samples during which this process
//! ran nothing on the device (another process's work, the gaps between
//! steps) are not anyone's: their bytes are only totalled.

use std::collections::BTreeSet;

use kernelscope_trace::PmSample;

/// A unit of device work, as attribution sees it: when and where it ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) start_ns: u64,
    pub(super) end_ns: u64,
    pub(super) device: u32,
    pub(super) stream: u32,
    /// Units of one kind (one kernel's name) are expected to move bytes at
    /// one rate; kinds number from 0.
    pub(super) kind: u32,
}

/// The DRAM bytes given to one unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Measured {
    pub(super) read: u64,
    pub(super) write: u64,
}

/// What a process's samples say about its units.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Attribution {
    /// Each unit's bytes, in the order the units were given.
    pub(super) units: Vec<Measured>,
    /// Bytes read during samples that overlapped no unit.
    pub(super) unattributed_read: u64,
    /// Bytes written during samples that overlapped no unit.
    pub(super) unattributed_write: u64,
    /// Units that ran while a unit of another stream ran on their device:
    /// their bytes are a share by time, not what each moved.
    pub(super) shared: usize,
    /// Units shorter than two of their device's samples.
    pub(super) low_confidence: usize,
    /// The median length of a sample, ns (0 without samples): what the
    /// sampling interval turned out to be.
    pub(super) sample_ns: u64,
    /// Time from each device's first sample to its last that no sample
    /// covers, ns, summed over devices: samples the device lost (its
    /// buffer full, or an interval shorter than it keeps up with), whose
    /// bytes are missing from every unit that ran then.
    pub(super) unsampled_ns: u64,
    /// Time from each device's first sample to its last, ns, summed.
    pub(super) sampled_span_ns: u64,
}

/// Rounds of refining each kind's rate (see [`attribute`]): each round moves
/// the split part of the way to where it settles; 12 rounds left a slow
/// kind beside a fast one 3.5 % off in the tests, 30 within 3 %.
const REFINEMENTS: usize = 32;

/// One sample's bytes and where, in the flat list of (unit, time inside
/// the sample) pairs, the units that ran in it are.
struct SampleShare {
    read: u64,
    write: u64,
    overlaps: std::ops::Range<usize>,
}

/// Gives each sample's bytes to the units of its device that ran during it,
/// in proportion to the traffic each is expected to make inside it: its
/// time inside the sample times its kind's rate (bytes a ns), found from
/// the whole run. The first split is by time alone; each kind's rate is
/// then its units' bytes over their time, and the samples are split again
/// by those rates, [`REFINEMENTS`] times. A sample's bytes are never more
/// or fewer than it holds; what changes is which of its units gets them, so
/// a short normalisation next to a mat-vec no longer takes half the
/// mat-vec's traffic because it ran half the sample.
pub(super) fn attribute(units: &[Span], samples: &[PmSample]) -> Attribution {
    let (mut unattributed_read, mut unattributed_write) = (0u64, 0u64);
    let mut low_confidence = 0;
    let (mut unsampled_ns, mut sampled_span_ns) = (0u64, 0u64);
    let mut shares: Vec<SampleShare> = Vec::new();
    let mut overlaps: Vec<(usize, u64)> = Vec::new();
    let devices: BTreeSet<u32> = samples.iter().map(|sample| sample.device).collect();
    for device in devices {
        let mut device_samples: Vec<&PmSample> =
            samples.iter().filter(|sample| sample.device == device).collect();
        device_samples.sort_by_key(|sample| (sample.start_ns, sample.end_ns));
        let interval = median_length(&device_samples);
        let (unsampled, span) = holes(&device_samples);
        unsampled_ns += unsampled;
        sampled_span_ns += span;
        let order = by_start(units, device);
        low_confidence += order
            .iter()
            .filter(|&&unit| length(&units[unit]) < interval.saturating_mul(2))
            .count();
        // One pass over samples and units both in start order: `running`
        // holds the units begun before the sample's end and not ended
        // before its start.
        let mut next = 0;
        let mut running: Vec<usize> = Vec::new();
        for sample in device_samples {
            while next < order.len() && units[order[next]].start_ns < sample.end_ns {
                running.push(order[next]);
                next += 1;
            }
            running.retain(|&unit| units[unit].end_ns > sample.start_ns);
            let first = overlaps.len();
            overlaps.extend(running.iter().filter_map(|&unit| {
                let overlap = overlap(&units[unit], sample.start_ns, sample.end_ns);
                (overlap > 0).then_some((unit, overlap))
            }));
            if overlaps.len() == first {
                unattributed_read += sample.dram_read_bytes;
                unattributed_write += sample.dram_write_bytes;
                continue;
            }
            shares.push(SampleShare {
                read: sample.dram_read_bytes,
                write: sample.dram_write_bytes,
                overlaps: first..overlaps.len(),
            });
        }
    }
    let (read, write) = split_by_rates(units, &shares, &overlaps);
    let sample_ns = median_length(&samples.iter().collect::<Vec<_>>());
    Attribution {
        units: read
            .iter()
            .zip(&write)
            .map(|(&read, &write)| Measured {
                read: read.round() as u64,
                write: write.round() as u64,
            })
            .collect(),
        unattributed_read,
        unattributed_write,
        shared: shared_units(units),
        low_confidence,
        sample_ns,
        unsampled_ns,
        sampled_span_ns,
    }
}

/// Each unit's (read, written) bytes: the samples split by time, then by
/// each kind's rates, refined [`REFINEMENTS`] times.
fn split_by_rates(units: &[Span], shares: &[SampleShare], overlaps: &[(usize, u64)]) -> (Vec<f64>, Vec<f64>) {
    let kinds = units.iter().map(|unit| unit.kind as usize + 1).max().unwrap_or(0);
    let mut time = vec![0f64; kinds];
    for unit in units {
        time[unit.kind as usize] += length(unit) as f64;
    }
    // Bytes a ns of each kind, read and written; equal at first: a split by time.
    let (mut read_rates, mut write_rates) = (vec![1f64; kinds], vec![1f64; kinds]);
    let (mut read, mut write) = (vec![0f64; units.len()], vec![0f64; units.len()]);
    for round in 0..=REFINEMENTS {
        read.fill(0.0);
        write.fill(0.0);
        for share in shares {
            let inside = &overlaps[share.overlaps.clone()];
            spread(share.read, inside, units, &read_rates, &mut read);
            spread(share.write, inside, units, &write_rates, &mut write);
        }
        if round == REFINEMENTS {
            break;
        }
        for (rates, split) in [(&mut read_rates, &read), (&mut write_rates, &write)] {
            let mut moved = vec![0f64; kinds];
            for (unit, span) in units.iter().enumerate() {
                moved[span.kind as usize] += split[unit];
            }
            for ((rate, moved), &time) in rates.iter_mut().zip(&moved).zip(&time) {
                if time > 0.0 {
                    *rate = moved / time;
                }
            }
        }
    }
    (read, write)
}

/// Adds to `split` a sample's `bytes`, shared among the units `inside` it
/// by their time in it times their kind's rate, or by time alone where
/// every kind there was found to move nothing.
fn spread(bytes: u64, inside: &[(usize, u64)], units: &[Span], rates: &[f64], split: &mut [f64]) {
    let weight = |unit: usize, overlap: u64| overlap as f64 * rates[units[unit].kind as usize];
    let total: f64 = inside.iter().map(|&(unit, overlap)| weight(unit, overlap)).sum();
    if total > 0.0 {
        for &(unit, overlap) in inside {
            split[unit] += bytes as f64 * (weight(unit, overlap) / total);
        }
    } else {
        let time: f64 = inside.iter().map(|&(_, overlap)| overlap as f64).sum();
        for &(unit, overlap) in inside {
            split[unit] += bytes as f64 * (overlap as f64 / time);
        }
    }
}

/// The time between the first of `samples` (in start order) and the last
/// that none covers, and that whole span, ns.
fn holes(samples: &[&PmSample]) -> (u64, u64) {
    let Some(first) = samples.first() else {
        return (0, 0);
    };
    let (mut unsampled, mut covered_until) = (0u64, first.end_ns);
    for sample in &samples[1..] {
        unsampled += sample.start_ns.saturating_sub(covered_until);
        covered_until = covered_until.max(sample.end_ns);
    }
    (unsampled, covered_until - first.start_ns)
}

impl Attribution {
    /// The warning a profile carries about its measured bytes: what no unit
    /// took, and how many units' figures are shares or uncertain.
    pub(super) fn describe(&self, pid: u32) -> String {
        format!(
            "process {pid}: DRAM bytes measured by PM sampling ({} samples), each sample's bytes \
             given to the kernels, copies and sets running in it by their time in it; given to none \
             (this process ran nothing on the device: another process's traffic, or idle): {} read, \
             {} written; units that ran beside work on another stream (a share by time, not measured \
             alone): {}; units shorter than two samples (low confidence): {}{}",
            microseconds(self.sample_ns),
            decimal_bytes(self.unattributed_read),
            decimal_bytes(self.unattributed_write),
            self.shared,
            self.low_confidence,
            self.describe_holes()
        )
    }

    /// Past [`UNSAMPLED_TOLERANCE`] of the sampled time uncovered, how much:
    /// every unit that ran then lacks those bytes.
    fn describe_holes(&self) -> String {
        let share = self.unsampled_ns as f64 / self.sampled_span_ns.max(1) as f64;
        if share <= UNSAMPLED_TOLERANCE {
            return String::new();
        }
        format!(
            "; no sample covers {:.1} % of the time from the first sample to the last (samples lost: \
             the measured bytes are short by about as much; a longer --dram-bytes-interval loses fewer)",
            100.0 * share
        )
    }
}

/// The share of the sampled time that may go uncovered (the gaps between
/// one sample's end and the next's start that timestamps round to) before
/// the warning says samples were lost.
const UNSAMPLED_TOLERANCE: f64 = 0.01;

/// `10 µs`: a length in ns as whole microseconds, as the conditions name it.
pub(super) fn microseconds(ns: u64) -> String {
    format!("{} µs", (ns + 500) / 1000)
}

/// `1.074 GB`, `12.5 MB`, `300 B`.
fn decimal_bytes(bytes: u64) -> String {
    let bytes = bytes as f64;
    if bytes >= 1e9 {
        format!("{:.3} GB", bytes / 1e9)
    } else if bytes >= 1e6 {
        format!("{:.1} MB", bytes / 1e6)
    } else {
        format!("{bytes} B")
    }
}

/// How long `unit` ran, ns.
fn length(unit: &Span) -> u64 {
    unit.end_ns.saturating_sub(unit.start_ns)
}

/// How long `unit` ran inside `start..end`, ns.
fn overlap(unit: &Span, start: u64, end: u64) -> u64 {
    unit.end_ns.min(end).saturating_sub(unit.start_ns.max(start))
}

/// The positions of `device`'s units, by start.
fn by_start(units: &[Span], device: u32) -> Vec<usize> {
    let mut order: Vec<usize> = (0..units.len())
        .filter(|&unit| units[unit].device == device)
        .collect();
    order.sort_by_key(|&unit| (units[unit].start_ns, units[unit].end_ns));
    order
}

/// The median length of `samples`, ns; 0 for none.
fn median_length(samples: &[&PmSample]) -> u64 {
    let mut lengths: Vec<u64> = samples
        .iter()
        .map(|sample| sample.end_ns.saturating_sub(sample.start_ns))
        .collect();
    lengths.sort_unstable();
    lengths.get(lengths.len() / 2).copied().unwrap_or(0)
}

/// How many units overlap, in time on their device, a unit of another stream.
fn shared_units(units: &[Span]) -> usize {
    let mut shared = vec![false; units.len()];
    let devices: BTreeSet<u32> = units.iter().map(|unit| unit.device).collect();
    for device in devices {
        let mut running: Vec<usize> = Vec::new();
        for unit in by_start(units, device) {
            let span = units[unit];
            running.retain(|&other| units[other].end_ns > span.start_ns);
            for &other in &running {
                if units[other].stream != span.stream
                    && overlap(&units[other], span.start_ns, span.end_ns) > 0
                {
                    shared[unit] = true;
                    shared[other] = true;
                }
            }
            running.push(unit);
        }
    }
    shared.iter().filter(|&&shared| shared).count()
}

#[cfg(test)]
mod tests;
