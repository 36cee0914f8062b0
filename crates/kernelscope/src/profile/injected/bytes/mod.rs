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
//! weighted down for the kinds a fit over the whole run finds slow
//! ([`attribute`], [`split_by_rates`]): split by time alone, the norm, rope
//! and attention kernels of a 1B decode, shorter than a sample, took 4-6 %
//! of the mat-vecs beside them on an H100.
//! Counters are device-wide: units of two streams that run together share
//! their samples' bytes, and so are flagged; a unit shorter than two
//! samples is flagged as low confidence. Samples during which this process
//! ran nothing on the device (another process's work, the gaps between
//! steps) are not anyone's: their bytes are only totalled.

use std::collections::BTreeSet;

use kernelscope_trace::PmSample;

mod rates;

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
    /// Whether samples covered the whole time the unit ran ([`COVERED`]).
    /// One that ran before its device's sampler started, after it stopped,
    /// or on a device never sampled has only part of its bytes, or none:
    /// it has no measured bytes, rather than too few.
    pub(super) covered: bool,
}

/// The share of a unit's time samples must cover for its bytes to count as
/// measured: timestamps round, so a unit inside contiguous samples may show
/// a few ns uncovered.
const COVERED: f64 = 0.99;

/// Uncovered time that never counts against a unit, ns: the few ns between
/// one sample's end and the next's start, which a unit of 100 ns straddling
/// them would otherwise lose its bytes to.
const UNCOVERED_SLACK_NS: u64 = 100;

/// What a process's samples say about its units.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Attribution {
    /// Each unit's bytes, in the order the units were given.
    pub(super) units: Vec<Measured>,
    /// Bytes read during samples that overlapped no unit.
    pub(super) unattributed_read: u64,
    /// Bytes written during samples that overlapped no unit.
    pub(super) unattributed_write: u64,
    /// Of the unattributed bytes, those read and written in samples that
    /// began after the process's last unit on their device had ended: its
    /// exit (the driver clearing the memory it freed: 2.5 GB written after
    /// a 1B's bf16 decode) or another process, not a kernel of this one.
    pub(super) after_last_unit: (u64, u64),
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
    /// Units not [`Measured::covered`], how long they ran, ns, and the
    /// samples' bytes the split had given them (given to none now).
    pub(super) uncovered: (usize, u64, u64),
    /// How long every unit ran, ns.
    pub(super) unit_ns: u64,
    /// The longest a device ran units before its first sample, ns: a
    /// sampler that started late (it starts on a thread of its own once the
    /// device's context exists, which took 640 ms on a loaded host).
    pub(super) sampler_late_ns: u64,
}

/// One sample's bytes and where, in the flat list of (unit, time inside
/// the sample) pairs, the units that ran in it are.
struct SampleShare {
    read: u64,
    write: u64,
    overlaps: std::ops::Range<usize>,
}

/// Gives each sample's bytes to the units of its device that ran during it,
/// by their time inside it, weighted down for kinds the fit over every
/// sample finds slow ([`split_by_rates`]). A sample's bytes are never more
/// or fewer than it holds; what changes is which of its units gets them, so
/// a short normalisation next to a mat-vec no longer takes half the
/// mat-vec's traffic because it ran half the sample.
pub(super) fn attribute(units: &[Span], samples: &[PmSample]) -> Attribution {
    let mut low_confidence = 0;
    let (mut unsampled_ns, mut sampled_span_ns, mut sampler_late_ns) = (0u64, 0u64, 0u64);
    let mut by_device: Vec<(Vec<&PmSample>, Vec<usize>)> = Vec::new();
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
        if let (Some(&first_unit), Some(first_sample)) = (order.first(), device_samples.first()) {
            sampler_late_ns =
                sampler_late_ns.max(first_sample.start_ns.saturating_sub(units[first_unit].start_ns));
        }
        low_confidence += order
            .iter()
            .filter(|&&unit| length(&units[unit]) < interval.saturating_mul(2))
            .count();
        by_device.push((device_samples, order));
    }
    let sample_ns = median_length(&samples.iter().collect::<Vec<_>>());
    let gathered = gather(units, &by_device);
    let (read, write) = split_by_rates(units, &gathered);
    let mut covered_ns = vec![0u64; units.len()];
    for &(unit, overlap) in &gathered.overlaps {
        covered_ns[unit] += overlap;
    }
    let covered = |unit: usize| {
        let length = length(&units[unit]);
        let missing = length.saturating_sub(covered_ns[unit]);
        missing <= UNCOVERED_SLACK_NS || covered_ns[unit] as f64 >= COVERED * length as f64
    };
    let measured: Vec<Measured> = read
        .iter()
        .zip(&write)
        .enumerate()
        .map(|(unit, (&read, &write))| Measured {
            read: read.round() as u64,
            write: write.round() as u64,
            covered: covered(unit),
        })
        .collect();
    let uncovered = (0..units.len()).filter(|&unit| !measured[unit].covered).fold(
        (0, 0, 0),
        |(count, ns, bytes), unit| {
            let given = (read[unit] + write[unit]).round() as u64;
            (count + 1, ns + length(&units[unit]), bytes + given)
        },
    );
    Attribution {
        units: measured,
        unattributed_read: gathered.unattributed_read,
        unattributed_write: gathered.unattributed_write,
        after_last_unit: gathered.after_last_unit,
        shared: shared_units(units),
        low_confidence,
        sample_ns,
        unsampled_ns,
        sampled_span_ns,
        uncovered,
        unit_ns: units.iter().map(length).sum(),
        sampler_late_ns,
    }
}

/// The samples of every device, each with the units that ran in it.
struct Gathered {
    shares: Vec<SampleShare>,
    overlaps: Vec<(usize, u64)>,
    /// Bytes of samples in which no unit ran, read and written.
    unattributed_read: u64,
    unattributed_write: u64,
    /// The part of them after the device's last unit: read, written.
    after_last_unit: (u64, u64),
}

/// Each device's samples with the units that ran in them.
fn gather(units: &[Span], by_device: &[(Vec<&PmSample>, Vec<usize>)]) -> Gathered {
    let mut gathered = Gathered {
        shares: Vec::new(),
        overlaps: Vec::new(),
        unattributed_read: 0,
        unattributed_write: 0,
        after_last_unit: (0, 0),
    };
    for (device_samples, order) in by_device {
        let last_end = order.iter().map(|&unit| units[unit].end_ns).max().unwrap_or(0);
        // One pass over samples and units both in start order: `running`
        // holds the units begun before the sample's end and not ended
        // before its start.
        let mut next = 0;
        let mut running: Vec<usize> = Vec::new();
        for sample in device_samples {
            let (start_ns, end_ns) = (sample.start_ns, sample.end_ns);
            while next < order.len() && units[order[next]].start_ns < end_ns {
                running.push(order[next]);
                next += 1;
            }
            running.retain(|&unit| units[unit].end_ns > start_ns);
            let first = gathered.overlaps.len();
            gathered.overlaps.extend(running.iter().filter_map(|&unit| {
                let overlap = overlap(&units[unit], start_ns, end_ns);
                (overlap > 0).then_some((unit, overlap))
            }));
            if gathered.overlaps.len() == first {
                gathered.unattributed_read += sample.dram_read_bytes;
                gathered.unattributed_write += sample.dram_write_bytes;
                if start_ns >= last_end {
                    gathered.after_last_unit.0 += sample.dram_read_bytes;
                    gathered.after_last_unit.1 += sample.dram_write_bytes;
                }
                continue;
            }
            gathered.shares.push(SampleShare {
                read: sample.dram_read_bytes,
                write: sample.dram_write_bytes,
                overlaps: first..gathered.overlaps.len(),
            });
        }
    }
    gathered
}

/// The share of the run's average rate below which a kind counts as slow
/// (see [`split_by_rates`]).
const SLOW_KIND: f64 = 0.5;

/// Each unit's (read, written) bytes: each sample split by its units' time
/// in it, weighted down for kinds that the fit over every sample (`rates`)
/// finds slow. A kind at [`SLOW_KIND`] of the run's average rate or more
/// weighs 1, a slower one its rate over that. Why not weigh by the fitted
/// rates themselves: the fit tells reliably which kinds barely move DRAM
/// bytes (norms, ropes, attention at decode), but not how two kinds that
/// stream memory compare, because their rate is not steady inside a run
/// (lower while its blocks ramp up and drain). On an H100, 20 µs samples of
/// a 1B decode (kscope's own, graph-replayed, serially launched and eager):
/// weighed by fitted rates, `matvec_add_bf16` came out 19-31 % short; by
/// time alone, every mat-vec 4-6 % short (the slow kinds beside them took
/// that); weighed so, within 3 %.
fn split_by_rates(units: &[Span], gathered: &Gathered) -> (Vec<f64>, Vec<f64>) {
    let (shares, overlaps) = (&gathered.shares, &gathered.overlaps);
    let kinds = units.iter().map(|unit| unit.kind as usize + 1).max().unwrap_or(0);
    let design = rates::Design::new(
        shares.iter().map(|share| {
            overlaps[share.overlaps.clone()]
                .iter()
                .map(|&(unit, overlap)| (units[unit].kind as usize, overlap as f64))
                .collect()
        }),
        kinds,
    );
    let busy_ns: f64 = overlaps.iter().map(|&(_, overlap)| overlap as f64).sum();
    let weights = |bytes: Vec<f64>| -> Vec<f64> {
        let average = bytes.iter().sum::<f64>() / busy_ns.max(1.0);
        let slow = SLOW_KIND * average;
        design
            .rates(&bytes)
            .iter()
            .map(|&rate| if slow > 0.0 { (rate / slow).min(1.0) } else { 1.0 })
            .collect()
    };
    let read_weights = weights(shares.iter().map(|share| share.read as f64).collect());
    let write_weights = weights(shares.iter().map(|share| share.write as f64).collect());
    let (mut read, mut write) = (vec![0f64; units.len()], vec![0f64; units.len()]);
    for share in shares {
        let inside = &overlaps[share.overlaps.clone()];
        spread(share.read, inside, units, &read_weights, &mut read);
        spread(share.write, inside, units, &write_weights, &mut write);
    }
    (read, write)
}

/// Adds to `split` a sample's `bytes`, shared among the units `inside` it
/// by their time in it times their kind's weight, or by time alone where
/// every kind there weighs nothing.
fn spread(bytes: u64, inside: &[(usize, u64)], units: &[Span], weights: &[f64], split: &mut [f64]) {
    let weight = |unit: usize, overlap: u64| overlap as f64 * weights[units[unit].kind as usize];
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
             given to the kernels, copies and sets running in it by their time in it, less to kinds \
             the fit over every sample finds slow; given to none \
             (this process ran nothing on the device: another process's traffic, or idle): {} read, \
             {} written, of which after its last kernel, copy or set (its exit: the driver clearing \
             the memory it freed, or another process) {} read, {} written; units that ran beside \
             work on another stream (a share by time, not measured alone): {}; units shorter than \
             two samples (low confidence): {}{}",
            microseconds(self.sample_ns),
            decimal_bytes(self.unattributed_read),
            decimal_bytes(self.unattributed_write),
            decimal_bytes(self.after_last_unit.0),
            decimal_bytes(self.after_last_unit.1),
            self.shared,
            self.low_confidence,
            self.describe_holes()
        ) + &self.describe_uncovered()
    }

    /// Units samples did not cover, when there are any: they have no
    /// measured bytes, and the profile must say so rather than show them short.
    fn describe_uncovered(&self) -> String {
        let (count, ns, bytes) = self.uncovered;
        if count == 0 {
            return String::new();
        }
        // Later than one sample: a sampler started late, not a phase.
        let late = if self.sampler_late_ns > self.sample_ns {
            format!(
                " (the sampler's first sample came {:.1} ms after the first of them began)",
                self.sampler_late_ns as f64 / 1e6
            )
        } else {
            String::new()
        };
        format!(
            "; {count} units ({:.1} % of the device time) ran where no sample covered them whole \
             (before the sampler started, after it stopped, or in lost samples){late}: they have no \
             measured bytes, and the {} of the samples' traffic that fell in their time went to none",
            100.0 * ns as f64 / self.unit_ns.max(1) as f64,
            decimal_bytes(bytes)
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
             the units that ran then have no measured bytes; a longer --dram-bytes-interval loses fewer)",
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
