//! The header Q4_K and Q5_K share: `d` and `dmin` (f16) and twelve bytes
//! packing eight 6-bit scales and eight 6-bit minimums. How the bytes are
//! unpacked (one at a time as ggml's reference does, or all at once as its
//! SIMD products do), multiplied out for dequantization, and fitted and
//! packed by the reference quantizer (`make_qkx2_quants`).

use super::shared::{nearest_int, read_f16, write_f16};

/// Offset of `d`, the f16 super-scale of the sub-block scales.
pub const D: usize = 0;
/// Offset of `dmin`, the f16 super-scale of the sub-block minimums.
pub const DMIN: usize = 2;
/// Offset of the 12 bytes of packed 6-bit scales and minimums.
pub const SCALES: usize = 4;
/// Bytes of the header: the values follow it.
pub const HEADER_BYTES: usize = 16;

/// The 6-bit scale and minimum of sub-block `sub_block` (0..8) of a Q4_K or
/// Q5_K block, from its 12 packed bytes (ggml's `get_scale_min_k4`). The
/// first four pairs are the low 6 bits of bytes 0..4 and 4..8; the last four
/// take their low 4 bits from bytes 8..12 and their top 2 bits from the
/// spare top bits of bytes 0..8.
#[inline]
pub fn scale_min_k4(sub_block: usize, packed: &[u8; 12]) -> (u8, u8) {
    let j = sub_block;
    if j < 4 {
        (packed[j] & 63, packed[j + 4] & 63)
    } else {
        (
            (packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4),
            (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4),
        )
    }
}

/// All eight 6-bit scales and minimums of a Q4_K or Q5_K block at once, as
/// llama.cpp's SIMD dot products unpack them (`utmp` and `kmask1..3`): a
/// few word operations instead of eight calls of [`scale_min_k4`], whose
/// results they equal.
#[inline(always)]
pub fn scales_mins_k4(packed: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    const LOW_SIX: u32 = 0x3f3f_3f3f;
    const LOW_FOUR: u32 = 0x0f0f_0f0f;
    const LOW_TWO: u32 = 0x0303_0303;
    let word = |i: usize| {
        u32::from_le_bytes([
            packed[4 * i],
            packed[4 * i + 1],
            packed[4 * i + 2],
            packed[4 * i + 3],
        ])
    };
    let (first, second, third) = (word(0), word(1), word(2));
    let scales_high = (third & LOW_FOUR) | (((first >> 6) & LOW_TWO) << 4);
    let mins_high = ((third >> 4) & LOW_FOUR) | (((second >> 6) & LOW_TWO) << 4);
    let scales = (u64::from(scales_high) << 32 | u64::from(first & LOW_SIX)).to_le_bytes();
    let mins = (u64::from(mins_high) << 32 | u64::from(second & LOW_SIX)).to_le_bytes();
    (scales, mins)
}

/// Eight 6-bit (scale, min) pairs packed into 12 bytes as
/// `quantize_row_q4_K_ref` packs them: the inverse of [`scale_min_k4`].
fn pack_scales_mins(pairs: [(u8, u8); 8]) -> [u8; 12] {
    let mut packed = [0u8; 12];
    for (j, (scale, min)) in pairs.into_iter().enumerate() {
        if j < 4 {
            packed[j] = scale;
            packed[j + 4] = min;
        } else {
            packed[j + 4] = (scale & 0xF) | ((min & 0xF) << 4);
            packed[j - 4] |= (scale >> 4) << 6;
            packed[j] |= (min >> 4) << 6;
        }
    }
    packed
}

/// The 12 packed bytes of a block.
#[inline(always)]
pub(super) fn packed<const BYTES: usize>(block: &[u8; BYTES]) -> &[u8; 12] {
    block[SCALES..SCALES + 12].try_into().expect("12 bytes of scales")
}

/// The scales and minimums of a Q4_K or Q5_K block, multiplied out:
/// `(d × scale, dmin × min)` per sub-block.
#[inline(always)]
pub(super) fn sub_block_scales<const BYTES: usize>(block: &[u8; BYTES]) -> [(f32, f32); 8] {
    let d = read_f16(block, D);
    let dmin = read_f16(block, DMIN);
    let packed = packed(block);
    std::array::from_fn(|sub_block| {
        let (scale, min) = scale_min_k4(sub_block, packed);
        (d * f32::from(scale), dmin * f32::from(min))
    })
}

/// ggml's `make_qkx2_quants` with `use_mad = false` (the only use here):
/// fits `x ≈ scale × level + min` (levels 0..=`nmax`, min ≤ 0) minimising
/// the weighted squared error, trying `nstep + 1` candidate scales around
/// `nmax / (max − min)`. Returns `(scale, −min)` and leaves the levels in
/// `levels`.
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32; 32],
    weights: &[f32; 32],
    levels: &mut [u8; 32],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32) {
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..32 {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels.fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..32 {
        let level = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        levels[i] = level as u8;
        let diff = scale * level as f32 + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    let mut candidate = [0u8; 32];
    for step in 0..=nstep {
        iscale = (rmin + rdelta * step as f32 + nmax as f32) / (max - min);
        let mut sum_l = 0.0f32;
        let mut sum_l2 = 0.0f32;
        let mut sum_xl = 0.0f32;
        for i in 0..32 {
            let level = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            candidate[i] = level as u8;
            let w = weights[i];
            let level = level as f32;
            sum_l += w * level;
            sum_l2 += w * level * level;
            sum_xl += w * level * x[i];
        }
        let determinant = sum_w * sum_l2 - sum_l * sum_l;
        if determinant > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / determinant;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / determinant;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut error = 0.0f32;
            for i in 0..32 {
                let diff = this_scale * f32::from(candidate[i]) + this_min - x[i];
                error += weights[i] * (diff * diff);
            }
            if error < best_error {
                *levels = candidate;
                best_error = error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// The K formats' weights for a sub-block of 32: its RMS plus each value's
/// magnitude, so large values count more without zeros counting for nothing.
fn k_weights(x: &[f32; 32]) -> [f32; 32] {
    let mut sum_x2 = 0.0f32;
    for &value in x {
        sum_x2 += value * value;
    }
    let rms = (sum_x2 / 32.0).sqrt();
    std::array::from_fn(|l| rms + x[l].abs())
}

/// The header of a Q4_K or Q5_K block: fits each sub-block, packs the 6-bit
/// scales and minimums and the f16 `d`/`dmin` into the block header, and
/// returns each element's level (0..=`nmax`) against the stored scales.
pub(super) fn quantize_header<const BYTES: usize>(
    values: &[f32; 256],
    block: &mut [u8; BYTES],
    nmax: i32,
    rmin: f32,
    nstep: i32,
) -> [u8; 256] {
    let mut levels = [0u8; 256];
    let mut scales = [0.0f32; 8];
    let mut mins = [0.0f32; 8];
    // Scales are positive because the minimum is taken out.
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..8 {
        let x: &[f32; 32] = values[32 * j..32 * j + 32].try_into().expect("32 values");
        let sub_levels: &mut [u8; 32] = (&mut levels[32 * j..32 * j + 32]).try_into().expect("32 levels");
        let (scale, min) = make_qkx2_quants(nmax, x, &k_weights(x), sub_levels, rmin, 0.1, nstep);
        scales[j] = scale;
        mins[j] = min;
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }

    let inverse_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inverse_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let packed = pack_scales_mins(std::array::from_fn(|j| {
        let scale = (nearest_int(inverse_scale * scales[j]) as u8).min(63);
        let min = (nearest_int(inverse_min * mins[j]) as u8).min(63);
        (scale, min)
    }));
    block[SCALES..SCALES + 12].copy_from_slice(&packed);
    let d = write_f16(block, D, max_scale / 63.0);
    let dmin = write_f16(block, DMIN, max_min / 63.0);

    // Requantize against the scales as stored (6-bit, f16), not as fitted.
    for j in 0..8 {
        let (scale, min) = scale_min_k4(j, &packed);
        let sub_d = d * f32::from(scale);
        if sub_d == 0.0 {
            continue; // keep the fitted levels, as ggml does
        }
        let sub_min = dmin * f32::from(min);
        for i in 32 * j..32 * j + 32 {
            levels[i] = nearest_int((values[i] + sub_min) / sub_d).clamp(0, nmax) as u8;
        }
    }
    levels
}

#[cfg(test)]
mod tests {
    use super::{pack_scales_mins, scale_min_k4, scales_mins_k4};

    #[test]
    fn scale_min_k4_unpacks_what_the_quantizer_packs() {
        // Eight known (scale, min) pairs, packed as the quantizer packs them.
        let pairs: [(u8, u8); 8] = [
            (1, 62),
            (63, 0),
            (17, 33),
            (40, 8),
            (63, 63),
            (5, 48),
            (32, 16),
            (0, 47),
        ];
        let packed = pack_scales_mins(pairs);
        for (j, &pair) in pairs.iter().enumerate() {
            assert_eq!(scale_min_k4(j, &packed), pair, "sub-block {j}");
        }
    }

    #[test]
    fn all_scales_at_once_equal_one_at_a_time() {
        let mut rng = crate::rng::SplitMix64::new(0x5ca1e);
        for _ in 0..2000 {
            let mut packed = [0u8; 12];
            packed.iter_mut().for_each(|byte| *byte = rng.next_u64() as u8);
            let (scales, mins) = scales_mins_k4(&packed);
            for sub_block in 0..8 {
                assert_eq!(
                    (scales[sub_block], mins[sub_block]),
                    scale_min_k4(sub_block, &packed),
                    "{packed:?}"
                );
            }
        }
    }
}
