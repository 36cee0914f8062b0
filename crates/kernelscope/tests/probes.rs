//! The roofline's probes on every backend: the GEMM probe's rate is 2·size³
//! flops over its fastest timed submission, as the device's own profiler
//! recorded it, and sizes or dtypes it cannot run are refused by name.

use kernelscope::probes::{
    COMPUTE_PROBE_LABEL, MAX_COMPUTE_PROBE_SIZE, default_compute_size, measure_compute,
};
use kernelscope::profile::ProfileLevel;
use kernelscope::testing::Backend;
use kernelscope::{DType, DeviceOptions, Error};

/// Small enough for the unoptimised CPU reference, large enough on a GPU
/// for tensor cores to matter.
fn probe_size(backend: Backend) -> usize {
    match backend {
        Backend::Cpu => 48,
        Backend::Cuda => 2048,
    }
}

fn compute_probe_is_timed_by_its_submissions(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new().profile(ProfileLevel::Submission)) else {
        return;
    };
    let size = probe_size(backend);
    let repetitions = 3;
    let gflops = measure_compute(&device, DType::BF16, size, repetitions).unwrap();
    assert!(gflops.is_finite() && gflops > 0.0, "{gflops} GFLOP/s");

    let submissions = device.profiler().submissions();
    let timed: Vec<u64> = submissions
        .iter()
        .filter(|submission| &*submission.label == COMPUTE_PROBE_LABEL)
        .map(|submission| submission.duration_ns())
        .collect();
    assert_eq!(timed.len(), repetitions, "one submission per repetition");
    let warmups = submissions
        .iter()
        .filter(|submission| *submission.label == format!("{COMPUTE_PROBE_LABEL}.warmup"))
        .count();
    assert_eq!(warmups, 1, "one untimed warm-up first");
    let fastest_ns = *timed.iter().min().unwrap();
    assert!(fastest_ns > 0, "a GEMM of {size}³ takes time");
    let expected = 2.0 * (size as f64).powi(3) / fastest_ns as f64;
    assert!(
        (gflops - expected).abs() <= 1e-9 * expected,
        "{gflops} GFLOP/s, but 2·{size}³ flops over the fastest {fastest_ns} ns is {expected}"
    );
}

fn compute_probe_without_submission_timing_uses_the_host_clock(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let gflops = measure_compute(&device, DType::BF16, probe_size(backend), 2).unwrap();
    assert!(gflops.is_finite() && gflops > 0.0, "{gflops} GFLOP/s");
    assert!(device.profiler().submissions().is_empty());
}

fn compute_probe_refuses_what_it_cannot_run(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    for size in [0, MAX_COMPUTE_PROBE_SIZE + 1] {
        let error = measure_compute(&device, DType::BF16, size, 1).unwrap_err();
        assert!(
            matches!(error, Error::ShapeMismatch { .. }) && error.to_string().contains("GEMM side"),
            "{error}"
        );
    }
    let error = measure_compute(&device, DType::U32, 8, 1).unwrap_err();
    assert!(
        matches!(error, Error::KernelMissing { .. }) && error.to_string().contains("matmul_u32"),
        "{error}"
    );
    let default = default_compute_size(&device);
    assert!((1..=MAX_COMPUTE_PROBE_SIZE).contains(&default), "{default}");
}

kernelscope::device_tests!(
    compute_probe_is_timed_by_its_submissions,
    compute_probe_without_submission_timing_uses_the_host_clock,
    compute_probe_refuses_what_it_cannot_run,
);
