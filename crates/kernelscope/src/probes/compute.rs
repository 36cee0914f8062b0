//! The compute probe: a device's peak GEMM rate, measured with the MatMul op
//! itself (cuBLASLt on tensor cores on CUDA, the multi-threaded reference on
//! the CPU), so the roofline's compute ceiling is what the model's GEMMs can
//! reach rather than a datasheet figure.

use half::{bf16, f16};

use crate::error::{Error, Result};
use crate::ops::matmul::MatMul;
use crate::rng::SplitMix64;
use crate::runtime::{Buffer, DType, Device};

/// The GEMM side [`measure_compute`] accepts at most: 16384³ already takes
/// 1.5 GiB of bf16 operands and 1 GiB of f32 output, and 8.8 TFLOP per run.
pub const MAX_COMPUTE_PROBE_SIZE: usize = 16_384;

/// The label of the probe's timed submissions (`compute-probe.warmup` for
/// the untimed first one), as they appear in the device's profiler.
pub const COMPUTE_PROBE_LABEL: &str = "compute-probe";

/// The GEMM side the probe uses by default on `device`: 8192 on a GPU
/// (about a millisecond per run on an H100, long enough that launch cost
/// and clock ramp-up vanish), 512 on the CPU (a tenth of a second or less
/// on a few cores, so `kscope run --profile` stays quick). A build without
/// optimisations (debug assertions on) uses 64 on the CPU: its reference
/// GEMM runs about 200 times slower, 15 s at 512, and its figure is no
/// peak of anything.
pub fn default_compute_size(device: &Device) -> usize {
    // By backend rather than capability: the two differ by three orders of
    // magnitude in rate, and a size right for one is useless on the other.
    match device {
        Device::Cpu(_) if cfg!(debug_assertions) => 64,
        Device::Cpu(_) => 512,
        Device::Cuda(_) => 8192,
    }
}

/// Measures `device`'s GEMM rate in GFLOP/s (2·size³ flops per run) as the
/// best of `repetitions` runs of `out[size, size] = x[size, size] ·
/// weight[size, size]ᵀ` with weights of `dtype` (bf16 for the tensor-core
/// peak), after one untimed warm-up run that makes the library's plan and
/// touches every page. Inputs are seeded random values in [-1, 1), never
/// zeros, since a GPU's rate depends on the power the data draws.
///
/// Each run is its own submission labeled [`COMPUTE_PROBE_LABEL`]. Where
/// the device's profiler times submissions (any level but `off`: event
/// pairs on CUDA, the host clock on the CPU), the run's time is its
/// submission's device time; otherwise it is the host's wall time around
/// commit and wait, which adds the launch and the wait (a few µs against
/// milliseconds at the default sizes). The best run rather than the median:
/// noise on a quiet machine only ever slows a run down (clock ramp-up,
/// interrupts, another process), and the copy probe
/// ([`measure_bandwidth`](super::measure_bandwidth)) takes its
/// best too, so the ridge point divides like by like.
///
/// `size` must be in `1..=`[`MAX_COMPUTE_PROBE_SIZE`]; a dtype without a
/// matmul kernel on the device is [`Error::KernelMissing`].
pub fn measure_compute(device: &Device, dtype: DType, size: usize, repetitions: usize) -> Result<f64> {
    if !(1..=MAX_COMPUTE_PROBE_SIZE).contains(&size) {
        return Err(Error::ShapeMismatch {
            context: format!("compute probe: the GEMM side must be in 1..={MAX_COMPUTE_PROBE_SIZE}"),
            expected: vec![MAX_COMPUTE_PROBE_SIZE.min(size.max(1))],
            found: vec![size],
        });
    }
    let matmul = MatMul::new(&crate::ops::registry(), device, dtype)?;
    // Any seed would do; a fixed one gives every run the same operands.
    let mut rng = SplitMix64::new(0x6e6d_6d75_6c20_7072);
    let weight = upload(
        device,
        dtype,
        &random_non_zero(&mut rng, size * size),
        &[size, size],
    )?;
    let x = upload(
        device,
        dtype,
        &random_non_zero(&mut rng, size * size),
        &[size, size],
    )?;
    let out = device.alloc(DType::F32, &[size, size])?;

    let best_seconds = super::timing::best_seconds(device, COMPUTE_PROBE_LABEL, repetitions, |encoder| {
        matmul.encode(encoder, &weight, &x, &out)
    })?;
    let flops = 2.0 * (size as f64).powi(3);
    Ok(flops / best_seconds / 1e9)
}

/// `count` values in [-1, 1), each nudged away from zero so no product of
/// the GEMM is zero by construction.
fn random_non_zero(rng: &mut SplitMix64, count: usize) -> Vec<f32> {
    (0..count)
        .map(|_| {
            let value = rng.uniform(-1.0, 1.0);
            if value.abs() < 1.0 / 64.0 {
                1.0 / 64.0
            } else {
                value
            }
        })
        .collect()
}

/// `values` rounded to `dtype` (to nearest) and copied to `device`.
fn upload(device: &Device, dtype: DType, values: &[f32], shape: &[usize]) -> Result<Buffer> {
    match dtype {
        DType::BF16 => {
            let rounded: Vec<bf16> = values.iter().map(|&value| bf16::from_f32(value)).collect();
            device.buffer_from_slice(&rounded, shape)
        }
        DType::F16 => {
            let rounded: Vec<f16> = values.iter().map(|&value| f16::from_f32(value)).collect();
            device.buffer_from_slice(&rounded, shape)
        }
        // f32; MatMul::new has refused every dtype without a kernel.
        _ => device.buffer_from_slice(values, shape),
    }
}
