//! DRAM bytes per kernel, measured: the injection library samples each
//! device's DRAM read and write counters every few microseconds (CUPTI's
//! PM sampling), and each sample's bytes are handed to the units (kernels,
//! copies, sets) that ran on its device during it, in proportion to how
//! long each ran inside it.
//!
//! The proportion is of the time units ran, not of the sample's length: a
//! sample that spans the end of one kernel, an idle gap and the start of the
//! next holds almost no traffic from the gap, so dividing by the sample's
//! length would lose the bytes of every sample at a kernel's edge (4 % of a
//! 1 GiB copy kernel's bytes at 100 µs samples, measured on an H100).
//! Counters are device-wide: units of two streams that run together share
//! their samples' bytes by time, not by what each moved, and so are flagged;
//! a unit shorter than two samples gets mostly bytes of its neighbours'
//! edges, so it is flagged too. Samples during which this process ran
//! nothing on the device (another process's work, the gaps between steps)
//! are not anyone's: their bytes are only totalled.

use std::collections::BTreeSet;

use kernelscope_trace::PmSample;

/// A unit of device work, as attribution sees it: when and where it ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) start_ns: u64,
    pub(super) end_ns: u64,
    pub(super) device: u32,
    pub(super) stream: u32,
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
}

/// Gives each sample's bytes to the units of its device that ran during it,
/// each in proportion to its time inside the sample.
pub(super) fn attribute(units: &[Span], samples: &[PmSample]) -> Attribution {
    let mut read = vec![0f64; units.len()];
    let mut write = vec![0f64; units.len()];
    let (mut unattributed_read, mut unattributed_write) = (0u64, 0u64);
    let mut low_confidence = 0;
    let devices: BTreeSet<u32> = samples.iter().map(|sample| sample.device).collect();
    for device in devices {
        let mut device_samples: Vec<&PmSample> =
            samples.iter().filter(|sample| sample.device == device).collect();
        device_samples.sort_by_key(|sample| (sample.start_ns, sample.end_ns));
        let interval = median_length(&device_samples);
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
        let mut overlaps: Vec<(usize, u64)> = Vec::new();
        for sample in device_samples {
            while next < order.len() && units[order[next]].start_ns < sample.end_ns {
                running.push(order[next]);
                next += 1;
            }
            running.retain(|&unit| units[unit].end_ns > sample.start_ns);
            overlaps.clear();
            overlaps.extend(running.iter().filter_map(|&unit| {
                let overlap = overlap(&units[unit], sample.start_ns, sample.end_ns);
                (overlap > 0).then_some((unit, overlap))
            }));
            let total: u64 = overlaps.iter().map(|&(_, overlap)| overlap).sum();
            if total == 0 {
                unattributed_read += sample.dram_read_bytes;
                unattributed_write += sample.dram_write_bytes;
                continue;
            }
            for &(unit, overlap) in &overlaps {
                let share = overlap as f64 / total as f64;
                read[unit] += sample.dram_read_bytes as f64 * share;
                write[unit] += sample.dram_write_bytes as f64 * share;
            }
        }
    }
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
    }
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
             alone): {}; units shorter than two samples (low confidence): {}",
            microseconds(self.sample_ns),
            decimal_bytes(self.unattributed_read),
            decimal_bytes(self.unattributed_write),
            self.shared,
            self.low_confidence
        )
    }
}

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
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    fn span(start_ns: u64, end_ns: u64, stream: u32) -> Span {
        Span {
            start_ns,
            end_ns,
            device: 0,
            stream,
        }
    }

    fn sample(start_ns: u64, end_ns: u64, read: u64, write: u64) -> PmSample {
        PmSample {
            start_ns,
            end_ns,
            dram_read_bytes: read,
            dram_write_bytes: write,
            device: 0,
            padding: 0,
        }
    }

    /// `low..high`, drawn from `random`.
    fn between(random: &mut SplitMix64, low: u64, high: u64) -> u64 {
        low + random.below(high - low)
    }

    /// Kernels one after another on one stream, with idle gaps of up to
    /// three intervals, each moving bytes at its own steady rate (reads
    /// 1-3 bytes/ns, writes 0.5-3), sampled at `interval` with ±10 % jitter
    /// from a random phase: each kernel's bytes come back within 1 %, and
    /// the idle gaps take nothing.
    fn serial_kernels_recovered(seed: u64, interval: u64) {
        let mut random = SplitMix64::new(seed);
        let mut kernels = Vec::new();
        let mut rates = Vec::new();
        let mut now = between(&mut random, 0, 3 * interval);
        for _ in 0..20 {
            let length = between(&mut random, 1000 * interval, 3000 * interval);
            kernels.push(span(now, now + length, 7));
            rates.push((
                1.0 + random.next_f32() as f64 * 2.0,
                0.5 + random.next_f32() as f64 * 2.5,
            ));
            now += length + between(&mut random, 0, 3 * interval);
        }
        let end = now + interval;
        let mut samples = Vec::new();
        let mut start = 0;
        while start < end {
            let length = between(&mut random, interval * 9 / 10, interval * 11 / 10);
            let (mut read, mut write) = (0.0, 0.0);
            for (kernel, &(read_rate, write_rate)) in kernels.iter().zip(&rates) {
                let inside = overlap(kernel, start, start + length) as f64;
                read += inside * read_rate;
                write += inside * write_rate;
            }
            samples.push(sample(start, start + length, read as u64, write as u64));
            start += length;
        }
        let attribution = attribute(&kernels, &samples);
        for ((kernel, &(read_rate, write_rate)), measured) in
            kernels.iter().zip(&rates).zip(&attribution.units)
        {
            let (read, write) = (
                length(kernel) as f64 * read_rate,
                length(kernel) as f64 * write_rate,
            );
            assert!(read > 0.0 && write > 0.0, "the bytes drawn are never zero");
            let read_error = (measured.read as f64 - read).abs() / read;
            let write_error = (measured.write as f64 - write).abs() / write;
            assert!(
                read_error < 0.01 && write_error < 0.01,
                "seed {seed}, interval {interval}: read {} of {read:.0}, written {} of {write:.0}",
                measured.read,
                measured.write
            );
        }
        assert_eq!(
            (attribution.unattributed_read, attribution.unattributed_write),
            (0, 0)
        );
        assert_eq!((attribution.shared, attribution.low_confidence), (0, 0));
        assert!(attribution.sample_ns.abs_diff(interval) <= interval / 10);
    }

    #[test]
    fn serial_kernels_get_their_own_bytes_at_every_interval() {
        for (seed, interval) in [(1, 5_000), (2, 10_000), (3, 20_000), (4, 100_000), (5, 100_000)] {
            serial_kernels_recovered(seed, interval);
        }
        let mut random = SplitMix64::new(28);
        for seed in 10..20 {
            serial_kernels_recovered(seed, between(&mut random, 5_000, 100_001));
        }
    }

    /// Each unit's (read, written) bytes.
    fn pairs(attribution: &Attribution) -> Vec<(u64, u64)> {
        attribution
            .units
            .iter()
            .map(|measured| (measured.read, measured.write))
            .collect()
    }

    #[test]
    fn a_kernel_inside_a_sample_gets_all_of_it_despite_the_idle_rest() {
        // 100 µs sample, one 30 µs kernel in it: dividing by the sample's
        // length would give the kernel 30 % of what it moved.
        let attribution = attribute(&[span(40_000, 70_000, 1)], &[sample(0, 100_000, 3_000, 1_000)]);
        assert_eq!(pairs(&attribution), [(3_000, 1_000)]);
        assert_eq!(attribution.low_confidence, 1, "shorter than two samples");
    }

    #[test]
    fn concurrent_units_split_a_sample_by_time_and_are_flagged_shared() {
        let units = [
            span(0, 10_000, 1),
            span(5_000, 10_000, 2),
            span(20_000, 30_000, 1),
        ];
        let attribution = attribute(
            &units,
            &[sample(0, 10_000, 900, 300), sample(20_000, 30_000, 50, 10)],
        );
        assert_eq!(pairs(&attribution), [(600, 200), (300, 100), (50, 10)]);
        assert_eq!(attribution.shared, 2);
    }

    #[test]
    fn samples_with_no_unit_running_are_unattributed() {
        let samples = [(0, 111, 222), (10_000, 500, 600), (20_000, 1_000, 2_000)]
            .map(|(start, read, write)| sample(start, start + 10_000, read, write));
        let attribution = attribute(&[span(10_000, 20_000, 1)], &samples);
        assert_eq!(pairs(&attribution), [(500, 600)]);
        let unattributed = (attribution.unattributed_read, attribution.unattributed_write);
        assert_eq!(unattributed, (1_111, 2_222));
    }

    #[test]
    fn samples_go_only_to_units_of_their_device() {
        let other = Span {
            device: 1,
            ..span(0, 10_000, 1)
        };
        let attribution = attribute(&[span(0, 10_000, 1), other], &[sample(0, 10_000, 70, 30)]);
        assert_eq!(
            pairs(&attribution),
            [(70, 30), (0, 0)],
            "device 1 was not sampled"
        );
        assert_eq!(attribution.shared, 0, "different devices share no counters");
    }

    /// Random units on two devices and several streams, random samples,
    /// some over idle time: every sampled byte is either given to a unit or
    /// unattributed (up to rounding), none invented.
    #[test]
    fn random_inputs_keep_every_byte() {
        let mut random = SplitMix64::new(0x6b73_636f_7065);
        for _ in 0..50 {
            let mut units = Vec::new();
            for _ in 0..between(&mut random, 1, 40) {
                let (start, device, stream) = (random.below(1_000_000), random.below(2), random.below(3));
                let unit = span(start, start + random.below(200_000), stream as u32);
                units.push(Span {
                    device: device as u32,
                    ..unit
                });
            }
            let mut samples = Vec::new();
            for device in 0..2 {
                let mut start = random.below(50_000);
                while start < 1_300_000 {
                    let length = between(&mut random, 1_000, 120_000);
                    let drawn = sample(
                        start,
                        start + length,
                        random.below(1 << 30),
                        random.below(1 << 30),
                    );
                    samples.push(PmSample { device, ..drawn });
                    start += length + random.below(2) * random.below(30_000);
                }
            }
            let sampled: u64 = samples.iter().map(|sample| sample.dram_read_bytes).sum();
            assert!(sampled > 0, "the generator draws traffic");
            let attribution = attribute(&units, &samples);
            let given: u64 = attribution.units.iter().map(|measured| measured.read).sum();
            let kept = given + attribution.unattributed_read;
            let rounding = units.len() as u64 + 1;
            assert!(
                kept.abs_diff(sampled) <= rounding,
                "{kept} of {sampled} bytes accounted for"
            );
        }
    }

    /// Through a record file: kernels get their samples' bytes, a set keeps
    /// what CUPTI says it wrote (but takes its share), the conditions say how.
    #[test]
    fn a_program_with_samples_has_measured_kernel_bytes() {
        use kernelscope_trace::{End, Header, Kernel, Memset, Writer};
        let mut writer = Writer::new(Vec::new(), &Header::default()).unwrap();
        let name = writer.text("copy_kernel").unwrap();
        for (correlation, start_ns) in [(1, 100_000), (2, 300_000)] {
            let end_ns = start_ns + 100_000;
            let kernel = Kernel {
                start_ns,
                end_ns,
                correlation,
                name,
                stream: 7,
                ..Kernel::default()
            };
            writer.record(&kernel).unwrap();
        }
        let (start_ns, end_ns) = (250_000, 260_000);
        writer
            .record(&Memset {
                start_ns,
                end_ns,
                bytes: 5,
                correlation: 3,
                ..Memset::default()
            })
            .unwrap();
        for start in (0..500_000).step_by(10_000) {
            let bytes = [1_000, 2_000][usize::from(start >= 200_000)];
            writer
                .record(&sample(start, start + 10_000, bytes, bytes / 2))
                .unwrap();
        }
        let trace = kernelscope_trace::read(&writer.end(&End::default()).unwrap());
        let process = super::super::ProcessTrace {
            path: "7.kst".into(),
            trace,
        };
        let ended = "exit 0".to_string();
        let profile = super::super::profile_of_program(&[process], None, vec![], ended, "t").unwrap();
        let bytes: Vec<(u64, u64)> = profile
            .dispatches
            .iter()
            .map(|dispatch| (dispatch.bytes, dispatch.bytes_written))
            .collect();
        // The first kernel's 10 samples of 1 000 + 500; the second's of 2 000 + 1 000.
        assert_eq!(bytes, [(15_000, 5_000), (5, 5), (30_000, 10_000)]);
        let how = profile.conditions.bytes_measured.as_deref();
        assert_eq!(
            how,
            Some("DRAM bytes by PM sampling (10 µs samples) attributed to kernels by time")
        );
        let warned = profile
            .warnings
            .iter()
            .any(|warning| warning.contains("idle): 48000 B read, 24000 B"));
        assert!(warned, "{:?}", profile.warnings);
    }

    #[test]
    fn the_warning_names_what_went_to_no_one() {
        let samples = [sample(0, 10_000, 2_500_000_000, 12_500_000)];
        let text = attribute(&[span(10_000, 20_000, 1)], &samples).describe(42);
        assert!(
            text.starts_with("process 42: DRAM bytes measured by PM sampling (10 µs samples)"),
            "{text}"
        );
        assert!(text.contains("idle): 2.500 GB read, 12.5 MB written;"), "{text}");
        assert!(
            text.contains("alone): 0;") && text.contains("(low confidence): 1"),
            "{text}"
        );
    }
}
