//! What the op tests share: seeded inputs, poisoned outputs, tolerance checks, dispatch checks.

use half::{bf16, f16};
use kernelscope::profile::ProfileLevel;
use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;
use kernelscope::{Buffer, DType, Device, DeviceOptions, OpKind};

/// Relative tolerance of f32 math against the f64 reference.
pub const REL_TOL: f64 = 1e-5;

pub const WEIGHT_DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

pub fn profiled_device(backend: Backend) -> Option<Device> {
    backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch))
}

/// `count` values uniform in `[low, high)` from `seed`.
pub fn random(seed: u64, count: usize, low: f32, high: f32) -> Vec<f32> {
    SplitMix64::new(seed).vec_f32(count, low, high)
}

pub fn widen(values: &[f32]) -> Vec<f64> {
    values.iter().map(|&v| f64::from(v)).collect()
}

/// `values` rounded to `dtype` and uploaded, with the rounded values in f64
/// for the reference.
pub fn weights(device: &Device, dtype: DType, values: &[f32], shape: &[usize]) -> (Buffer, Vec<f64>) {
    match dtype {
        DType::F32 => (device.buffer_from_slice(values, shape).unwrap(), widen(values)),
        DType::F16 => {
            let rounded: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
            let exact = rounded.iter().map(|v| v.to_f64()).collect();
            (device.buffer_from_slice(&rounded, shape).unwrap(), exact)
        }
        DType::BF16 => {
            let rounded: Vec<bf16> = values.iter().map(|&v| bf16::from_f32(v)).collect();
            let exact = rounded.iter().map(|v| v.to_f64()).collect();
            (device.buffer_from_slice(&rounded, shape).unwrap(), exact)
        }
        other => panic!("{other} is not a weight dtype"),
    }
}

/// An f32 output buffer filled with NaN.
pub fn poisoned(device: &Device, shape: &[usize]) -> Buffer {
    let buffer = device.alloc(DType::F32, shape).unwrap();
    buffer.write_from(&vec![f32::NAN; buffer.len()]).unwrap();
    buffer
}

/// A one-element u32 output holding u32::MAX.
pub fn poisoned_u32(device: &Device) -> Buffer {
    device.buffer_from_slice(&[u32::MAX], &[1]).unwrap()
}

/// Fails when some `|actual - expected| > abs_tol + rel_tol * |expected|`
/// (NaN always fails), printing the first mismatches.
pub fn assert_close(actual: &[f32], expected: &[f64], rel_tol: f64, abs_tol: f64, what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    let bad: Vec<usize> = (0..actual.len())
        .filter(|&i| {
            let error = (f64::from(actual[i]) - expected[i]).abs();
            error.is_nan() || error > abs_tol + rel_tol * expected[i].abs()
        })
        .collect();
    if !bad.is_empty() {
        let first: Vec<String> = bad
            .iter()
            .take(5)
            .map(|&i| format!("[{i}] expected {:e}, got {:e}", expected[i], actual[i]))
            .collect();
        panic!(
            "{what}: {} of {} values mismatch; {}",
            bad.len(),
            actual.len(),
            first.join("; ")
        );
    }
}

/// Every dispatch the profiler recorded declares `kind` and runs a kernel
/// named `<kernel_prefix>...`.
pub fn assert_dispatched(device: &Device, kind: OpKind, kernel_prefix: &str) {
    let dispatches = device.profiler().dispatches();
    assert!(!dispatches.is_empty(), "no dispatch recorded");
    for dispatch in &dispatches {
        assert_eq!(dispatch.op_kind, kind, "{dispatch:?}");
        assert!(dispatch.kernel.starts_with(kernel_prefix), "{dispatch:?}");
    }
}

/// Row counts every row-batched op is tested at: decode's single row and
/// odd batches.
pub const ROWS: [usize; 3] = [1, 3, 17];

/// An output buffer of `dtype` filled with NaN.
pub fn poisoned_as(device: &Device, dtype: DType, shape: &[usize]) -> Buffer {
    let count = shape.iter().product();
    match dtype {
        DType::F32 => poisoned(device, shape),
        DType::F16 => device.buffer_from_slice(&vec![f16::NAN; count], shape).unwrap(),
        DType::BF16 => device.buffer_from_slice(&vec![bf16::NAN; count], shape).unwrap(),
        other => panic!("{other} is not a float dtype"),
    }
}

/// A float buffer's values widened to f32 (exactly).
pub fn read_f32(buffer: &Buffer) -> Vec<f32> {
    match buffer.dtype() {
        DType::F32 => buffer.to_vec::<f32>().unwrap(),
        DType::F16 => buffer
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect(),
        DType::BF16 => buffer
            .to_vec::<bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect(),
        other => panic!("{other} is not a float dtype"),
    }
}

/// `value` rounded to nearest even in `dtype` by half's conversions
/// (independent of the crate's), widened back.
pub fn round_to(dtype: DType, value: f64) -> f64 {
    match dtype {
        DType::F32 => f64::from(value as f32),
        DType::F16 => f16::from_f32(value as f32).to_f64(),
        DType::BF16 => bf16::from_f32(value as f32).to_f64(),
        other => panic!("{other} is not a float dtype"),
    }
}

/// [`assert_close`] for an output stored in `dtype`. The op computes in f32
/// and rounds once to `dtype`, so each value must be what some result within
/// the f32 tolerance of the reference rounds to: between the roundings of
/// `expected ∓ (abs_tol + rel_tol·|expected|)` (rounding is monotonic).
/// That admits the one unit in the last place by which the f32 result and
/// the exact one differ when they straddle a rounding boundary (2^-7 of the
/// value for bf16, 2^-10 for f16), and nothing else: a conversion that
/// truncates, or rounds ties away, fails.
pub fn assert_close_in(
    dtype: DType,
    actual: &[f32],
    expected: &[f64],
    rel_tol: f64,
    abs_tol: f64,
    what: &str,
) {
    if dtype == DType::F32 {
        return assert_close(actual, expected, rel_tol, abs_tol, what);
    }
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    let bounds = |i: usize| {
        let margin = abs_tol + rel_tol * expected[i].abs();
        (
            round_to(dtype, expected[i] - margin),
            round_to(dtype, expected[i] + margin),
        )
    };
    let bad: Vec<usize> = (0..actual.len())
        .filter(|&i| {
            let (low, high) = bounds(i);
            let value = f64::from(actual[i]);
            !(low <= value && value <= high)
        })
        .collect();
    if !bad.is_empty() {
        let first: Vec<String> = bad
            .iter()
            .take(5)
            .map(|&i| {
                let (low, high) = bounds(i);
                format!(
                    "[{i}] expected {:e} (stored in {low:e}..={high:e}), got {:e}",
                    expected[i], actual[i]
                )
            })
            .collect();
        panic!(
            "{what}: {} of {} {dtype} values mismatch; {}",
            bad.len(),
            actual.len(),
            first.join("; ")
        );
    }
}

/// The output dtypes an op that narrows to the weights' dtype supports for
/// `weight`: f32 and, when different, the weight's own.
pub fn output_dtypes(weight: DType) -> Vec<DType> {
    if weight == DType::F32 {
        vec![DType::F32]
    } else {
        vec![DType::F32, weight]
    }
}

/// Every dispatch since the last check ran `kernel`; clears the profile.
pub fn assert_kernel(device: &Device, kernel: &str) {
    let dispatches = device.profiler().dispatches();
    assert!(!dispatches.is_empty(), "no dispatch recorded for {kernel}");
    for dispatch in &dispatches {
        assert_eq!(&*dispatch.kernel, kernel, "{dispatch:?}");
    }
    device.profiler().reset();
}
