//! The ceilings every roofline divides by: the CPU's read probe against a
//! plain read loop written here, read against copy, one probe against
//! itself, and `measure_ceilings` measuring each figure once per process
//! with its method. The checks of a rate take the best of a few rounds, as
//! the probes take the best of their runs: a busy machine only ever slows
//! a run down.

use kernelscope::ops::ceilings::{CeilingProbes, measure_ceilings, measure_on};
use kernelscope::ops::copy::measure_bandwidth;
use kernelscope::ops::stream_read::measure_read_bandwidth;
use kernelscope::profile::{BandwidthBasis, ProfileLevel};
use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;
use kernelscope::{Device, DeviceOptions};

/// Large enough to stream from memory rather than cache on any CPU here,
/// small enough for a test: 256 MiB.
const CPU_BYTES: usize = 256 << 20;

/// Rounds a rate check may take before it fails.
const ROUNDS: usize = 3;

/// Held by every test that measures a rate: two at once would share the
/// cores and the memory bus and measure each other.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn measuring() -> std::sync::MutexGuard<'static, ()> {
    MEASURING.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn timed_device(backend: Backend) -> Option<Device> {
    backend.device(DeviceOptions::new().profile(ProfileLevel::Submission))
}

fn probe_bytes(backend: Backend) -> usize {
    match backend {
        Backend::Cpu => CPU_BYTES,
        Backend::Cuda => 1 << 30,
    }
}

/// The reference: every thread of rayon's pool (the threads the CPU
/// backend runs on, so both wake and are scheduled alike) sums its share of
/// `words` in a plain loop, as anyone would write a read loop; best of 5,
/// in GB/s.
fn reference_read_gbps(words: &[u64]) -> f64 {
    use rayon::prelude::*;
    let threads = rayon::current_num_threads().max(1);
    let share = words.len().div_ceil(threads);
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let start = std::time::Instant::now();
        let sum = words
            .par_chunks(share)
            .map(|chunk| chunk.iter().fold(0u64, |sum, &word| sum.wrapping_add(word)))
            .reduce(|| 0, u64::wrapping_add);
        best = best.min(start.elapsed().as_secs_f64());
        std::hint::black_box(sum);
    }
    std::mem::size_of_val(words) as f64 / best / 1e9
}

#[test]
fn the_cpu_read_probe_reads_as_fast_as_a_plain_read_loop() {
    let _measuring = measuring();
    let device = timed_device(Backend::Cpu).expect("the CPU is always there");
    let mut rng = SplitMix64::new(0x7265_6164);
    let words: Vec<u64> = (0..CPU_BYTES / 8).map(|_| rng.next_u64()).collect();
    // Paired rounds, each measuring both back to back (in turns, so
    // neither always goes first): a neighbour that slows the machine for a
    // while slows both sides of a pair, where the best of each over all
    // rounds could pair a quiet moment of one with a busy one of the other.
    let mut rounds = Vec::new();
    for round in 0..2 * ROUNDS {
        let (probe, reference) = if round % 2 == 0 {
            let reference = reference_read_gbps(&words);
            (measure_read_bandwidth(&device, CPU_BYTES, 5).unwrap(), reference)
        } else {
            let probe = measure_read_bandwidth(&device, CPU_BYTES, 5).unwrap();
            (probe, reference_read_gbps(&words))
        };
        eprintln!("read probe {probe:.1} GB/s, plain read loop {reference:.1} GB/s");
        rounds.push((probe, reference));
        if probe >= 0.95 * reference {
            return;
        }
    }
    panic!(
        "in no round did the read probe come within 5 % of a plain read loop (GB/s, probe and loop): {rounds:.1?}"
    );
}

fn reads_are_at_least_a_copys_rate_per_direction(backend: Backend) {
    let _measuring = measuring();
    let Some(device) = timed_device(backend) else {
        return;
    };
    let bytes = probe_bytes(backend);
    let (mut read, mut copy) = (0.0f64, f64::INFINITY);
    for _ in 0..ROUNDS {
        read = read.max(measure_read_bandwidth(&device, bytes, 5).unwrap());
        copy = copy.min(measure_bandwidth(&device, bytes, 5).unwrap());
        // A copy's bytes are half reads, half writes.
        if read >= copy / 2.0 {
            break;
        }
    }
    assert!(
        read >= copy / 2.0,
        "read {read:.1} GB/s, copy {copy:.1} GB/s (both directions)"
    );
}

fn two_read_probes_agree_within_noise(backend: Backend) {
    let _measuring = measuring();
    let Some(device) = timed_device(backend) else {
        return;
    };
    let bytes = probe_bytes(backend);
    let mut ratios = Vec::new();
    // Each probe the best of 10 reads: on a shared machine the best of
    // more runs is the more likely to have met a quiet moment.
    for _ in 0..2 * ROUNDS {
        let first = measure_read_bandwidth(&device, bytes, 10).unwrap();
        let second = measure_read_bandwidth(&device, bytes, 10).unwrap();
        let ratio = first / second;
        if (0.85..=1.0 / 0.85).contains(&ratio) {
            return;
        }
        ratios.push(ratio);
    }
    panic!("two read probes of one device differed in every round, by factors of {ratios:.3?}");
}

fn ceilings_are_measured_once_with_their_methods(backend: Backend) {
    let _measuring = measuring();
    // Probing needs the device; the measurement opens its own handle.
    if timed_device(backend).is_none() {
        return;
    }
    let spec = match backend {
        Backend::Cpu => "cpu",
        Backend::Cuda => "cuda:0",
    };
    let probes = CeilingProbes {
        bandwidth_bytes: Some(16 << 20),
        compute_size: Some(256),
    };
    let first = measure_ceilings(spec, probes).unwrap();
    let ceilings = &first.ceilings;
    for (name, ceiling) in [
        ("read", &ceilings.read),
        ("write", &ceilings.write),
        ("copy", &ceilings.copy),
        ("compute", &ceilings.compute),
    ] {
        let ceiling = ceiling.as_ref().unwrap_or_else(|| panic!("no {name} ceiling"));
        assert!(
            ceiling.value.is_finite() && ceiling.value > 0.0,
            "{name}: {ceiling:?}"
        );
        assert!(ceiling.method.contains("best of"), "{name}: {ceiling:?}");
    }
    assert_eq!(
        ceilings.bandwidth().map(|(_, basis)| basis),
        Some(BandwidthBasis::Read)
    );
    match backend {
        Backend::Cpu => {
            // No physical limits from a CPU; its compute ceiling is the best
            // instruction set it has, measured in registers.
            assert_eq!(ceilings.physical_bandwidth, None);
            let best = first
                .instruction_peaks
                .iter()
                .map(|peak| peak.gflops)
                .fold(0.0, f64::max);
            assert_eq!(ceilings.compute.as_ref().unwrap().value, best);
            assert!(
                first
                    .instruction_peaks
                    .iter()
                    .any(|peak| peak.instruction.contains("scalar"))
            );
        }
        Backend::Cuda => {
            // The physical limit is above what any kernel reaches.
            let physical = ceilings
                .physical_bandwidth
                .as_ref()
                .expect("a GPU reports its memory");
            assert!(
                physical.value > ceilings.read.as_ref().unwrap().value,
                "{ceilings:?}"
            );
            assert!(first.instruction_peaks.is_empty());
        }
    }
    // Cached: the same figures again, without measuring.
    let start = std::time::Instant::now();
    let second = measure_ceilings(spec, probes).unwrap();
    assert_eq!(second, first);
    assert!(
        start.elapsed().as_millis() < 50,
        "measured again: {:?}",
        start.elapsed()
    );
    // Other probe sizes are another measurement; no compute asked, none given.
    let without_compute = CeilingProbes {
        bandwidth_bytes: Some(0),
        compute_size: Some(0),
    };
    let device = timed_device(backend).unwrap();
    let bare = measure_on(&device, without_compute).unwrap();
    assert_eq!((bare.ceilings.read, bare.ceilings.compute), (None, None));
}

kernelscope::device_tests!(
    reads_are_at_least_a_copys_rate_per_direction,
    two_read_probes_agree_within_noise,
    ceilings_are_measured_once_with_their_methods,
);
