//! The attribution of sampled DRAM bytes to units, on made-up samples and units.

use super::*;
use crate::rng::SplitMix64;

mod slow_kinds;

fn span(start_ns: u64, end_ns: u64, stream: u32) -> Span {
    Span {
        start_ns,
        end_ns,
        device: 0,
        stream,
        kind: 0,
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
    for ((kernel, &(read_rate, write_rate)), measured) in kernels.iter().zip(&rates).zip(&attribution.units) {
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
    assert_eq!(
        attribution.after_last_unit,
        (1_000, 2_000),
        "the sample after the unit ended"
    );
    let warning = attribution.describe(7);
    assert!(
        warning.contains("1111 B read, 2222 B written, of which after its last kernel, copy or set (its exit: the driver clearing the memory it freed, or another process) 1000 B read, 2000 B written"),
        "{warning}"
    );
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
    // The third kernel runs after the last sample: it has no measured bytes.
    for (correlation, start_ns) in [(1, 100_000), (2, 300_000), (4, 600_000)] {
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
    assert_eq!(bytes, [(15_000, 5_000), (5, 5), (30_000, 10_000), (0, 0)]);
    let how = profile.conditions.bytes_measured.as_deref();
    assert_eq!(
        how,
        Some(
            "DRAM bytes by PM sampling (10 µs samples) attributed to kernels by time, slow kinds weighted down"
        )
    );
    let warned = profile
        .warnings
        .iter()
        .any(|warning| warning.contains("idle): 48000 B read, 24000 B"));
    assert!(warned, "{:?}", profile.warnings);
    let uncovered = profile.warnings.iter().any(|warning| {
        warning.contains("; 1 units (32.3 % of the device time) ran where no sample covered them whole")
    });
    assert!(uncovered, "{:?}", profile.warnings);
}

#[test]
fn lost_samples_are_measured_and_said() {
    let mut random = SplitMix64::new(0x686f_6c65);
    for _ in 0..20 {
        let interval = between(&mut random, 5_000, 20_000);
        let (mut samples, mut now, mut lost) = (Vec::new(), between(&mut random, 0, 1_000_000), 0);
        let first = now;
        for index in 0..200 {
            // Every fifth sample on average is lost; the first and last are kept.
            let kept = index == 0 || index == 199 || !random.next_u64().is_multiple_of(5);
            if kept {
                samples.push(sample(now, now + interval, 1_000, 10));
            } else {
                lost += interval;
            }
            now += interval;
        }
        let attribution = attribute(&[span(first, now, 1)], &samples);
        assert_eq!(attribution.unsampled_ns, lost);
        assert_eq!(attribution.sampled_span_ns, now - first);
        let text = attribution.describe(7);
        let share = 100.0 * lost as f64 / (now - first) as f64;
        assert!(text.contains(&format!("no sample covers {share:.1} %")), "{text}");
    }
    // Back to back (or overlapping) samples lose nothing, and say nothing of it.
    let samples = [
        sample(0, 10_000, 5, 5),
        sample(10_000, 20_000, 5, 5),
        sample(15_000, 30_000, 5, 5),
    ];
    let attribution = attribute(&[span(0, 30_000, 1)], &samples);
    assert_eq!(
        (attribution.unsampled_ns, attribution.sampled_span_ns),
        (0, 30_000)
    );
    assert!(!attribution.describe(7).contains("no sample covers"));
}

#[test]
fn the_warning_names_what_went_to_no_one() {
    let samples = [sample(0, 10_000, 2_500_000_000, 12_500_000)];
    let text = attribute(&[span(10_000, 20_000, 1)], &samples).describe(42);
    assert!(
        text.starts_with("process 42: DRAM bytes measured by PM sampling (10 µs samples)"),
        "{text}"
    );
    assert!(
        text.contains("idle): 2.500 GB read, 12.5 MB written, of which after its last kernel"),
        "{text}"
    );
    assert!(
        text.contains("or another process) 0 B read, 0 B written;"),
        "{text}"
    );
    assert!(
        text.contains("alone): 0;") && text.contains("(low confidence): 1"),
        "{text}"
    );
}

/// Units that ran before the first sample, across its start, after the
/// last, in a lost sample, or on a device never sampled have no measured
/// bytes, and the warning says how many, how long, and how late the
/// sampler started; units inside contiguous samples are measured.
#[test]
fn units_the_samples_do_not_cover_have_no_measured_bytes() {
    let mut random = SplitMix64::new(0x6c61_7465);
    for _ in 0..50 {
        let interval = between(&mut random, 5_000, 20_000);
        let first_unit = between(&mut random, 0, 100_000);
        let late = between(&mut random, 1, 2_000_000);
        let sampling_starts = first_unit + late;
        let count = between(&mut random, 20, 200);
        let lost = between(&mut random, 1, count - 1);
        let mut samples = Vec::new();
        for index in 0..count {
            let start = sampling_starts + index * interval;
            if index != lost {
                samples.push(sample(
                    start,
                    start + interval,
                    between(&mut random, 1, 1 << 20),
                    7,
                ));
            }
        }
        let sampling_ends = sampling_starts + count * interval;
        let lost_at = sampling_starts + lost * interval;
        let mut units = vec![span(first_unit, first_unit + between(&mut random, 1, late), 1)];
        let mut expected = vec![false];
        for _ in 0..30 {
            let start = between(&mut random, first_unit, sampling_ends + 100_000);
            let end = start + between(&mut random, 100, 3 * interval);
            units.push(span(start, end, 1));
            // Covered: inside the samples but for at most 100 ns, or 1 % of the unit.
            let inside = |from: u64, to: u64| end.min(to).saturating_sub(start.max(from));
            let covered = inside(sampling_starts, sampling_ends) - inside(lost_at, lost_at + interval);
            let missing = (end - start) - covered;
            expected.push(missing <= 100 || covered as f64 >= 0.99 * (end - start) as f64);
        }
        let mut elsewhere = span(sampling_starts, sampling_starts + interval, 1);
        elsewhere.device = 1;
        units.push(elsewhere);
        expected.push(false);
        let attribution = attribute(&units, &samples);
        let covered: Vec<bool> = attribution
            .units
            .iter()
            .map(|measured| measured.covered)
            .collect();
        for ((unit, &got), &want) in units.iter().zip(&covered).zip(&expected) {
            assert_eq!(
                got, want,
                "{unit:?} with samples {sampling_starts}..{sampling_ends}, lost at {lost_at}"
            );
        }
        let uncovered: Vec<&Span> = units
            .iter()
            .zip(&expected)
            .filter(|(_, covered)| !**covered)
            .map(|(unit, _)| unit)
            .collect();
        let uncovered_ns: u64 = uncovered.iter().map(|unit| unit.end_ns - unit.start_ns).sum();
        assert_eq!(
            (attribution.uncovered.0, attribution.uncovered.1),
            (uncovered.len(), uncovered_ns)
        );
        assert_eq!(attribution.sampler_late_ns, late);
        let text = attribution.describe(3);
        let share = 100.0 * uncovered_ns as f64 / attribution.unit_ns as f64;
        assert!(
            text.contains(&format!(
                "; {} units ({share:.1} % of the device time) ran where no sample",
                uncovered.len()
            )),
            "{text}"
        );
        // Said when later than one sample.
        let said = format!(
            "the sampler's first sample came {:.1} ms after",
            late as f64 / 1e6
        );
        assert_eq!(text.contains(&said), late > attribution.sample_ns, "{text}");
    }
    // A unit of 150 ns across a 40 ns gap between two samples keeps its bytes.
    let samples = [sample(0, 10_000, 5, 5), sample(10_040, 20_000, 5, 5)];
    let attribution = attribute(&[span(9_950, 10_100, 1)], &samples);
    assert!(attribution.units[0].covered, "{:?}", attribution.units);
    // Units wholly inside back-to-back samples: nothing said.
    let samples = [sample(0, 10_000, 5, 5), sample(10_000, 20_000, 5, 5)];
    let attribution = attribute(&[span(0, 20_000, 1), span(5_000, 6_000, 1)], &samples);
    assert!(attribution.units.iter().all(|measured| measured.covered));
    assert!(!attribution.describe(7).contains("no sample covered"));
}
