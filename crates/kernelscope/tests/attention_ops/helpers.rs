//! What the attention tests share: caches in each dtype, poisoned outputs, the f64 attention reference.

use half::{bf16, f16};
use kernelscope::ops::attention::Heads;
use kernelscope::profile::ProfileLevel;
use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;
use kernelscope::{Buffer, DType, Device, DeviceOptions};

pub const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// f32 softmax and sums against f64: relative error of a few ulps of the
/// largest terms, over up to 70,000 positions.
pub const REL_TOL: f64 = 2e-4;
pub const ABS_TOL: f64 = 2e-5;

pub fn device_for(backend: Backend) -> Option<Device> {
    backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch))
}

pub fn random(seed: u64, count: usize, low: f32, high: f32) -> Vec<f32> {
    SplitMix64::new(seed).vec_f32(count, low, high)
}

/// `values` rounded to `dtype`, widened back.
pub fn rounded(values: &[f32], dtype: DType) -> Vec<f64> {
    values
        .iter()
        .map(|&v| match dtype {
            DType::F16 => f16::from_f32(v).to_f64(),
            DType::BF16 => bf16::from_f32(v).to_f64(),
            _ => f64::from(v),
        })
        .collect()
}

/// A buffer of `values` in `dtype`.
pub fn upload(device: &Device, values: &[f32], dtype: DType, shape: &[usize]) -> Buffer {
    match dtype {
        DType::F16 => {
            let narrow: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
            device.buffer_from_slice(&narrow, shape).unwrap()
        }
        DType::BF16 => {
            let narrow: Vec<bf16> = values.iter().map(|&v| bf16::from_f32(v)).collect();
            device.buffer_from_slice(&narrow, shape).unwrap()
        }
        _ => device.buffer_from_slice(values, shape).unwrap(),
    }
}

/// A buffer's values widened to f64, whatever its dtype.
pub fn download(buffer: &Buffer) -> Vec<f64> {
    match buffer.dtype() {
        DType::F16 => buffer
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f64())
            .collect(),
        DType::BF16 => buffer
            .to_vec::<bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f64())
            .collect(),
        _ => buffer
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|&v| f64::from(v))
            .collect(),
    }
}

/// A buffer of `dtype` filled with NaN.
pub fn poisoned(device: &Device, dtype: DType, len: usize) -> Buffer {
    upload(device, &vec![f32::NAN; len], dtype, &[len])
}

pub fn assert_close(actual: &[f64], expected: &[f64], rel_tol: f64, abs_tol: f64, what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    let bad: Vec<usize> = (0..actual.len())
        .filter(|&i| {
            let error = (actual[i] - expected[i]).abs();
            error.is_nan() || error > abs_tol + rel_tol * expected[i].abs()
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: {} of {} values mismatch; first [{}] expected {:e}, got {:e}",
        bad.len(),
        actual.len(),
        bad[0],
        expected[bad[0]],
        actual[bad[0]]
    );
}

/// Attention of one query row (`[heads.query * dim]`) over cache positions
/// `0..=position` (keys and values `[positions, kv_dim]`, already rounded).
pub fn reference(query: &[f32], keys: &[f64], values: &[f64], heads: Heads, position: usize) -> Vec<f64> {
    let (d, group) = (heads.dim, heads.query / heads.key_value);
    let kv_dim = heads.key_value * d;
    let mut out = vec![0.0; heads.query * d];
    for h in 0..heads.query {
        let kv = (h / group) * d;
        let scores: Vec<f64> = (0..=position)
            .map(|p| {
                let dot: f64 = (0..d)
                    .map(|i| f64::from(query[h * d + i]) * keys[p * kv_dim + kv + i])
                    .sum();
                dot / (d as f64).sqrt()
            })
            .collect();
        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = scores.iter().map(|s| (s - max).exp()).sum();
        for (p, score) in scores.iter().enumerate() {
            let weight = (score - max).exp() / total;
            for i in 0..d {
                out[h * d + i] += weight * values[p * kv_dim + kv + i];
            }
        }
    }
    out
}
