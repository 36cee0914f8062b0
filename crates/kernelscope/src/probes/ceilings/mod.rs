//! A device's ceilings, measured the way the best code reaches them, once
//! per process: the read probe (`stream_read`), the write probe
//! (`stream_write`) and the copy probe (`copy`) for memory; for compute,
//! the bf16 GEMM (cuBLASLt on tensor cores) on a GPU and the widest
//! multiply-add instructions in registers on the CPU; and beside them the
//! physical limits the device reports. Every figure carries its method.

mod cpu_peak;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

pub use cpu_peak::{InstructionPeak, measure_cpu_peaks};

use crate::error::Result;
use crate::profile::{Ceiling, Ceilings, ProfileLevel};
use crate::runtime::{DType, Device, DeviceOptions};

/// Timed runs each probe takes the best of (after one warm-up).
pub const PROBE_REPETITIONS: usize = 5;

/// Rounds per thread of the CPU's instruction probe: about 20 ms a set
/// (a build without optimisations calls each intrinsic as a function, a
/// hundred times slower: it takes a hundredth, and its figure is no peak).
const CPU_PEAK_ITERATIONS: u64 = if cfg!(debug_assertions) { 20_000 } else { 2_000_000 };

/// What to measure: the bandwidth probes' size (`None`: the device's
/// default, 0: skipped) and the GEMM's side on a GPU (`None`: the default,
/// 0: skipped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CeilingProbes {
    /// Bytes each bandwidth probe streams (`None`: see
    /// [`default_bandwidth_bytes`]); 0 measures no bandwidth.
    pub bandwidth_bytes: Option<usize>,
    /// The side of the GPU's GEMM probe (`None`: 8192; `Some(0)`: no
    /// compute ceiling). The CPU's compute ceiling is its instruction
    /// probe, which takes no size; 0 skips it too.
    pub compute_size: Option<usize>,
}

/// Everything measured of one device: its ceilings (what a profile
/// records) and each CPU instruction set's rate, where it is a CPU.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measured {
    /// The ceilings, each with its method.
    pub ceilings: Ceilings,
    /// The CPU's rate for each instruction set it has, widest first (the
    /// compute ceiling is the best of them); empty for a GPU.
    pub instruction_peaks: Vec<InstructionPeak>,
}

/// The ceilings of the device `spec` names (as `Device::open` takes it),
/// measured on a fresh handle that times submissions with device events
/// and never with CUPTI (whose records slow every launch a little), so
/// measure before anything in this process profiles at dispatch level.
/// Cached per device and probe sizes for the life of the process: a second
/// call returns the first call's figures without measuring again.
pub fn measure_ceilings(spec: &str, probes: CeilingProbes) -> Result<Measured> {
    static CACHE: OnceLock<Mutex<HashMap<(String, CeilingProbes), Measured>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (spec.to_string(), probes);
    // A poisoned lock only means another thread panicked mid-insert; the
    // map itself is still whole.
    if let Some(measured) = cache
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get(&key)
    {
        return Ok(measured.clone());
    }
    let (device, _) = Device::open(spec, DeviceOptions::new().profile(ProfileLevel::Submission))?;
    let measured = measure_on(&device, probes)?;
    cache
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .insert(key, measured.clone());
    Ok(measured)
}

/// The bandwidth probes' default size on `device`: 1 GiB on a GPU, where a
/// read of 256 MiB on an H100 lasts under 90 µs and loses a tenth of its
/// rate to the kernel's start and its last wave (2,740 against 3,090 GB/s
/// at 1 GiB, same machine); 256 MiB on the CPU, well past its caches.
pub fn default_bandwidth_bytes(device: &Device) -> usize {
    match device {
        Device::Cpu(_) => 256 << 20,
        Device::Cuda(_) => 1 << 30,
    }
}

/// The ceilings of `device` (not cached: see [`measure_ceilings`]).
pub fn measure_on(device: &Device, probes: CeilingProbes) -> Result<Measured> {
    let mut ceilings = Ceilings::default();
    let timing = if device.profiler().times_submissions() {
        format!("timed by {}", device.capabilities().submission_timing)
    } else {
        "host wall time around commit and wait".to_string()
    };
    let bytes = probes
        .bandwidth_bytes
        .unwrap_or_else(|| default_bandwidth_bytes(device));
    if bytes > 0 {
        let size = format!("{} MiB", bytes.div_ceil(1 << 20));
        let method = |probe: &str, what: &str| {
            format!("{probe}: best of {PROBE_REPETITIONS} {what} of {size}, {timing}")
        };
        let read = super::stream_read::measure_read_rate(device, bytes, PROBE_REPETITIONS)?;
        ceilings.read = Some(Ceiling::new(
            read.gbps,
            method(
                &match &read.grid {
                    Some(grid) => format!("stream_read probe, the fastest of its grids ({grid})"),
                    None => "stream_read probe".to_string(),
                },
                "streaming reads (bytes read)",
            ),
        ));
        ceilings.write = Some(Ceiling::new(
            super::stream_write::measure_write_bandwidth(device, bytes, PROBE_REPETITIONS)?,
            method("stream_write probe", "streaming writes (bytes written)"),
        ));
        ceilings.copy = Some(Ceiling::new(
            super::copy_bandwidth::measure_bandwidth(device, bytes, PROBE_REPETITIONS)?,
            method("copy probe", "copies (bytes read + written)"),
        ));
    }
    let mut instruction_peaks = Vec::new();
    match (device, probes.compute_size) {
        (_, Some(0)) => {}
        (Device::Cpu(_), _) => {
            instruction_peaks = measure_cpu_peaks(CPU_PEAK_ITERATIONS);
            ceilings.compute = instruction_peaks
                .iter()
                .max_by(|a, b| a.gflops.total_cmp(&b.gflops))
                .map(|peak| {
                    Ceiling::new(
                        peak.gflops,
                        format!(
                            "{} in registers on {} threads, best of 5",
                            peak.instruction, peak.threads
                        ),
                    )
                });
        }
        (Device::Cuda(_), size) => {
            let size = size.unwrap_or_else(|| super::compute::default_compute_size(device));
            ceilings.compute = Some(Ceiling::new(
                super::compute::measure_compute(device, DType::BF16, size, PROBE_REPETITIONS)?,
                format!("bf16 GEMM {size}×{size}×{size} (cuBLASLt), best of {PROBE_REPETITIONS}, {timing}"),
            ));
        }
    }
    let limits = device.physical_limits();
    ceilings.physical_bandwidth = limits
        .memory_bandwidth
        .map(|(gbps, method)| Ceiling::new(gbps, method));
    ceilings.physical_compute = limits
        .tensor_compute
        .map(|(gflops, method)| Ceiling::new(gflops, method));
    Ok(Measured {
        ceilings,
        instruction_peaks,
    })
}
