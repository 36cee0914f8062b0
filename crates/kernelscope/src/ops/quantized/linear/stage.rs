//! The CPU reference of `quantize_q8` (stage.cu): x quantized to 8-bit
//! blocks of 32 in the `Staged` layout the CUDA products read (k values,
//! then k / 32 scales, then k / 32 scaled sums), with the same arithmetic,
//! so CPU and CUDA products over it see the same activations. The CPU's
//! own quantized mat-vecs quantize x themselves; the expert products
//! (`ops::quantized::experts`) read x staged this way on both backends.

use super::arguments::quantize::{K, OUT, X};
use crate::error::{Error, Result};
use crate::runtime::KernelArgs;

/// Values of x in one quantization block.
const STAGE_BLOCK: usize = 32;

/// One block of 32 quantized as `quantize_four` does: the values, the
/// scale (largest magnitude / 127) and the scale times the values' sum.
fn quantize_block(values: &[f32]) -> ([i8; STAGE_BLOCK], f32, f32) {
    // A NaN makes the scale NaN (f32::max would drop it, and the block
    // would quantize to numbers), so every product over the block is NaN.
    let largest = values.iter().fold(0.0f32, |largest, value| {
        if largest.is_nan() || value.is_nan() {
            f32::NAN
        } else {
            largest.max(value.abs())
        }
    });
    let scale = largest / 127.0;
    let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
    let mut quantized = [0i8; STAGE_BLOCK];
    let mut sum = 0i32;
    for (out, value) in quantized.iter_mut().zip(values) {
        let rounded = (value * inverse).round() as i32;
        *out = rounded as i8;
        sum += rounded;
    }
    (quantized, scale, scale * sum as f32)
}

/// `quantize_q8`: x f32 `[k]` into `out` u8 `[k + 8 · k / 32]`.
pub(super) fn quantize_q8(args: &KernelArgs<'_>) -> Result<()> {
    let k = args.u32(K)? as usize;
    let x = args.input::<f32>(X)?;
    let out = args.output::<u8>(OUT)?;
    let blocks = k / STAGE_BLOCK;
    if !k.is_multiple_of(STAGE_BLOCK) || x.len() < k || out.len() < k + 8 * blocks {
        return Err(Error::KernelFailed {
            kernel: "quantize_q8".into(),
            message: format!("{k} values are not whole blocks of 32, or a buffer is shorter than its shape"),
        });
    }
    stage_values(&x[..k], out);
    Ok(())
}

/// `x` (whole blocks of 32) quantized into `out` (at least
/// `staged_bytes(x.len())` bytes) in the `Staged` layout, as `quantize_q8`
/// writes it.
pub(crate) fn stage_values(x: &[f32], out: &mut [u8]) {
    let k = x.len();
    let blocks = k / STAGE_BLOCK;
    let (values, fields) = out.split_at_mut(k);
    let (scales, sums) = fields[..8 * blocks].split_at_mut(4 * blocks);
    for block in 0..blocks {
        let (quantized, scale, scaled_sum) = quantize_block(&x[block * STAGE_BLOCK..][..STAGE_BLOCK]);
        for (out, value) in values[block * STAGE_BLOCK..][..STAGE_BLOCK]
            .iter_mut()
            .zip(quantized)
        {
            *out = value as u8;
        }
        scales[4 * block..4 * block + 4].copy_from_slice(&scale.to_le_bytes());
        sums[4 * block..4 * block + 4].copy_from_slice(&scaled_sum.to_le_bytes());
    }
}

/// Row `row` of x staged as one vector of rows of `length` values (`total`
/// in all), dequantized: `value · scale` of each element.
pub(crate) fn staged_row(staged: &[u8], total: usize, length: usize, row: usize) -> Vec<f32> {
    let blocks_per_row = length / STAGE_BLOCK;
    let scales = &staged[total..];
    (0..length)
        .map(|i| {
            let at = row * length + i;
            let block = row * blocks_per_row + i / STAGE_BLOCK;
            let scale = f32::from_le_bytes(scales[4 * block..4 * block + 4].try_into().expect("4 bytes"));
            staged[at] as i8 as f32 * scale
        })
        .collect()
}
