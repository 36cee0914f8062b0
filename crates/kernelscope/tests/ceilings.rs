//! The ceilings every roofline divides by: `measure_ceilings` measuring
//! each figure once per process with its method, finite and above 0. How
//! fast the probes read against a plain read loop and a copy is a
//! benchmark's to say (`cargo bench -p kernelscope --bench read_ceiling`):
//! a test of a speed fails on a busy machine.

use kernelscope::probes::ceilings::{CeilingProbes, measure_ceilings, measure_on};
use kernelscope::profile::{BandwidthBasis, ProfileLevel};
use kernelscope::testing::Backend;
use kernelscope::{Device, DeviceOptions};

fn timed_device(backend: Backend) -> Option<Device> {
    backend.device(DeviceOptions::new().profile(ProfileLevel::Submission))
}

fn ceilings_are_measured_once_with_their_methods(backend: Backend) {
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
    // Cached: the same figures again, to the bit (two measurements of a
    // best-of time never agree to the bit).
    let second = measure_ceilings(spec, probes).unwrap();
    assert_eq!(second, first);
    // Other probe sizes are another measurement; no compute asked, none given.
    let without_compute = CeilingProbes {
        bandwidth_bytes: Some(0),
        compute_size: Some(0),
    };
    let device = timed_device(backend).unwrap();
    let bare = measure_on(&device, without_compute).unwrap();
    assert_eq!((bare.ceilings.read, bare.ceilings.compute), (None, None));
}

kernelscope::device_tests!(ceilings_are_measured_once_with_their_methods);
