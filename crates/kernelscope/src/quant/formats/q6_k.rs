//! Q6_K (ggml's `block_q6_K`): 256 elements in 16 sub-blocks of 16 with
//! signed 8-bit scales; in sub-block `s`, value = d × scales[s] × (6-bit
//! value − 32). Its integer product meets activations quantized to
//! `block_q8_K`.

use std::mem::offset_of;

use crate::quant::block_format::{BlockFormat, Field, field};
use crate::quant::int8::Int8Activations;
use crate::quant::shared::{GROUP_MAX_EPS, nearest_int, read_f16, read_f16_at, write_f16};

/// A block as ggml lays it out, field for field.
#[repr(C)]
pub struct Block {
    /// 128 bytes of low nibbles: in each half of 128 elements, 64 bytes
    /// where byte `l` holds elements `l` (low) and `l + 64` (high).
    pub ql: [u8; 128],
    /// 64 bytes of high bit pairs: in each half, byte `l` holds the pairs of
    /// elements `l`, `l + 32`, `l + 64`, `l + 96` from the low bits up.
    pub qh: [u8; 64],
    /// 16 signed 8-bit sub-block scales.
    pub scales: [u8; 16],
    /// The f16 super-scale.
    pub d: [u8; 2],
}

/// Size of a block.
pub const BYTES: usize = size_of::<Block>();
const _: () = assert!(BYTES == 210, "ggml-common.h: sizeof(block_q6_K)");
/// Elements a block holds.
pub const ELEMENTS: usize = 256;
/// Offset of `ql`.
pub const QL: usize = offset_of!(Block, ql);
/// Offset of `qh`.
pub const QH: usize = offset_of!(Block, qh);
/// Offset of `scales`.
pub const SCALES: usize = offset_of!(Block, scales);
/// Offset of `d`.
pub const D: usize = offset_of!(Block, d);

/// The format, as the row loops and `QuantFormat` dispatch to it.
#[allow(non_camel_case_types)]
pub(crate) struct Q6_K;

impl BlockFormat<BYTES, ELEMENTS> for Q6_K {
    const GGML_TYPE: u32 = 14;
    const NAME: &'static str = "q6_k";
    const GGML_NAME: &'static str = "Q6_K";
    const PLANES: &'static [Field] = &[field(QL, 128), field(QH, 64), field(SCALES, 16), field(D, 2)];
    const INT8_BLOCK: Option<usize> = Some(256);

    #[inline(always)]
    fn dequantize(block: &[u8; BYTES], out: &mut [f32; ELEMENTS]) {
        let d = read_f16(block, D);
        for half in 0..2 {
            let low = &block[QL + 64 * half..QL + 64 * half + 64];
            let high = &block[QH + 32 * half..QH + 32 * half + 32];
            let scales = &block[SCALES + 8 * half..SCALES + 8 * half + 8];
            let out = &mut out[128 * half..128 * half + 128];
            for l in 0..32 {
                let sub = l / 16;
                let q1 = i32::from((low[l] & 0xF) | ((high[l] & 3) << 4)) - 32;
                let q2 = i32::from((low[l + 32] & 0xF) | (((high[l] >> 2) & 3) << 4)) - 32;
                let q3 = i32::from((low[l] >> 4) | (((high[l] >> 4) & 3) << 4)) - 32;
                let q4 = i32::from((low[l + 32] >> 4) | (((high[l] >> 6) & 3) << 4)) - 32;
                let scale = |index: usize| d * f32::from(scales[index] as i8);
                out[l] = scale(sub) * q1 as f32;
                out[l + 32] = scale(sub + 2) * q2 as f32;
                out[l + 64] = scale(sub + 4) * q3 as f32;
                out[l + 96] = scale(sub + 6) * q4 as f32;
            }
        }
    }

    fn quantize(values: &[f32; ELEMENTS], block: &mut [u8; BYTES]) {
        let mut levels = [0u8; 256];
        let mut scales = [0.0f32; 16];
        let mut max_scale = 0.0f32;
        let mut max_absolute_scale = 0.0f32;
        for sub in 0..16 {
            let x: &[f32; 16] = values[16 * sub..16 * sub + 16].try_into().expect("16 values");
            let sub_levels: &mut [u8; 16] = (&mut levels[16 * sub..16 * sub + 16])
                .try_into()
                .expect("16 levels");
            let scale = make_qx_quants(32, x, sub_levels);
            scales[sub] = scale;
            if scale.abs() > max_absolute_scale {
                max_absolute_scale = scale.abs();
                max_scale = scale;
            }
        }
        if max_absolute_scale < GROUP_MAX_EPS {
            block.fill(0);
            return;
        }

        let iscale = -128.0 / max_scale;
        let d = write_f16(block, D, 1.0 / iscale);
        let mut stored_scales = [0i8; 16];
        for (stored, &scale) in stored_scales.iter_mut().zip(&scales) {
            *stored = nearest_int(iscale * scale).min(127) as i8;
        }
        for (byte, &scale) in block[SCALES..SCALES + 16].iter_mut().zip(&stored_scales) {
            *byte = scale as u8;
        }

        // Requantize against the scales as stored, as in the K formats above.
        for (sub, &scale) in stored_scales.iter().enumerate() {
            let sub_d = d * f32::from(scale);
            if sub_d == 0.0 {
                continue;
            }
            for i in 16 * sub..16 * sub + 16 {
                levels[i] = (nearest_int(values[i] / sub_d).clamp(-32, 31) + 32) as u8;
            }
        }

        for half in 0..2 {
            let levels = &levels[128 * half..128 * half + 128];
            for l in 0..32 {
                let (q1, q2, q3, q4) = (levels[l], levels[l + 32], levels[l + 64], levels[l + 96]);
                block[QL + 64 * half + l] = (q1 & 0xF) | ((q3 & 0xF) << 4);
                block[QL + 64 * half + l + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4);
                block[QH + 32 * half + l] =
                    (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
            }
        }
    }

    #[inline(always)]
    fn dot_int8(blocks: &[u8], x: &Int8Activations) -> Option<f32> {
        let mut total = 0.0f32;
        for (index, block) in blocks.chunks_exact(BYTES).enumerate() {
            let activations = &x.quants[index * 256..index * 256 + 256];
            let mut values = [0i8; 256];
            for half_block in 0..2 {
                let low = &block[QL + 64 * half_block..QL + 64 * half_block + 64];
                let high = &block[QH + 32 * half_block..QH + 32 * half_block + 32];
                let out = &mut values[128 * half_block..128 * half_block + 128];
                for l in 0..32 {
                    out[l] = ((low[l] & 0x0F) | ((high[l] & 3) << 4)) as i8 - 32;
                    out[l + 32] = ((low[l + 32] & 0x0F) | (((high[l] >> 2) & 3) << 4)) as i8 - 32;
                    out[l + 64] = ((low[l] >> 4) | (((high[l] >> 4) & 3) << 4)) as i8 - 32;
                    out[l + 96] = ((low[l + 32] >> 4) | (((high[l] >> 6) & 3) << 4)) as i8 - 32;
                }
            }
            let mut scaled = 0i32;
            for group in 0..16 {
                let mut sum = 0i32;
                for i in 0..16 {
                    sum += i32::from(values[group * 16 + i]) * i32::from(activations[group * 16 + i]);
                }
                scaled += i32::from(block[SCALES + group] as i8) * sum;
            }
            total += read_f16_at(block, D) * x.scales[index] * scaled as f32;
        }
        Some(total)
    }
}

/// ggml's `make_qx_quants` with `rmse_type = 1` and no importance weights
/// (Q6_K's use): symmetric levels −`nmax`..`nmax`−1 stored offset by
/// `nmax`, weighted by x², trying 19 scales around `nmax / max`. Returns
/// the scale (negative where the largest value is positive, as in ggml).
fn make_qx_quants(nmax: i32, x: &[f32; 16], levels: &mut [u8; 16]) -> f32 {
    let mut max = 0.0f32;
    let mut absolute_max = 0.0f32;
    for &value in x {
        if value.abs() > absolute_max {
            absolute_max = value.abs();
            max = value;
        }
    }
    if absolute_max < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let level_of = |iscale: f32, value: f32| nearest_int(iscale * value).clamp(-nmax, nmax - 1);
    let mut iscale = -(nmax as f32) / max;
    let mut sum_lx = 0.0f32;
    let mut sum_l2 = 0.0f32;
    for i in 0..16 {
        let level = level_of(iscale, x[i]);
        levels[i] = (level + nmax) as u8;
        let w = x[i] * x[i];
        let level = level as f32;
        sum_lx += w * x[i] * level;
        sum_l2 += w * level * level;
    }
    let mut scale = if sum_l2 != 0.0 { sum_lx / sum_l2 } else { 0.0 };
    let mut best = scale * sum_lx;
    for step in (-9..=9).filter(|&step| step != 0) {
        iscale = -(nmax as f32 + 0.1 * step as f32) / max;
        sum_lx = 0.0;
        sum_l2 = 0.0;
        for &value in x {
            let level = level_of(iscale, value) as f32;
            let w = value * value;
            sum_lx += w * value * level;
            sum_l2 += w * level * level;
        }
        if sum_l2 > 0.0 && sum_lx * sum_lx > best * sum_l2 {
            for i in 0..16 {
                levels[i] = (level_of(iscale, x[i]) + nmax) as u8;
            }
            scale = sum_lx / sum_l2;
            best = scale * sum_lx;
        }
    }
    scale
}
