//! llama.cpp's reference quantizers (`quantize_row_*_ref` in ggml-quants.c)
//! for one block, ported operation for operation: every f32 product, sum and
//! quotient in the C order, no fused multiply-add (ggml-base is built
//! without one), so the bytes are identical to llama.cpp's. A reordering
//! that looks harmless here changes a rounding, then a level, then a byte.

use super::blocks::{self, scale_min_k4, write_f16};

/// ggml's `GROUP_MAX_EPS`: below this a group counts as all zeros.
const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: rounds to nearest, ties to even, by adding
/// 1.5 × 2²³ so the float adder does the rounding. Reproduced bit for bit
/// rather than with `round_ties_even` so that out-of-range inputs (NaN, or
/// beyond ±2²², where ggml only asserts in debug builds) give ggml's answer.
#[inline]
pub(super) fn nearest_int(value: f32) -> i32 {
    let biased = value + 12_582_912.0;
    (biased.to_bits() & 0x007F_FFFF) as i32 - 0x0040_0000
}

/// C's conversion of a float to an integer type, as llama.cpp's x86-64
/// builds do it (`cvttss2si`): truncation toward zero, and for NaN or a
/// value out of `i32`'s range, `i32::MIN`, whose low byte is 0. C leaves
/// these cases undefined; they are reached only when a block's scale is so
/// small that its reciprocal overflows to infinity. Narrowing the result
/// with `as` then keeps the low bits, as the C code's store does.
#[inline]
fn c_float_to_int(value: f32) -> i32 {
    if (-2_147_483_648.0..2_147_483_648.0).contains(&value) {
        value as i32
    } else {
        i32::MIN
    }
}

/// The value of largest magnitude, sign kept (the first of equals).
fn signed_absolute_max(values: &[f32]) -> f32 {
    let mut absolute_max = 0.0f32;
    let mut max = 0.0f32;
    for &value in values {
        if absolute_max < value.abs() {
            absolute_max = value.abs();
            max = value;
        }
    }
    max
}

/// Minimum and maximum, starting from ggml's ±`FLT_MAX`; `<` and `>` keep
/// the first of equal values, which decides the sign of a zero minimum.
fn min_max(values: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &value in values {
        if value < min {
            min = value;
        }
        if value > max {
            max = value;
        }
    }
    (min, max)
}

/// `1 / d`, or 0 where `d` is 0 so an all-zero block stores zeros.
fn reciprocal_or_zero(d: f32) -> f32 {
    if d != 0.0 { 1.0 / d } else { 0.0 }
}

pub(super) fn q4_0(values: &[f32; 32], block: &mut [u8; blocks::q4_0::BYTES]) {
    use blocks::q4_0::{D, QS};
    let d = signed_absolute_max(values) / -8.0;
    let inverse = reciprocal_or_zero(d);
    write_f16(block, D, d);
    let level = |value: f32| (c_float_to_int(value * inverse + 8.5) as i8 as i32).min(15) as u8;
    for j in 0..16 {
        block[QS + j] = level(values[j]) | (level(values[j + 16]) << 4);
    }
}

pub(super) fn q4_1(values: &[f32; 32], block: &mut [u8; blocks::q4_1::BYTES]) {
    use blocks::q4_1::{D, M, QS};
    let (min, max) = min_max(values);
    let d = (max - min) / 15.0;
    let inverse = reciprocal_or_zero(d);
    write_f16(block, D, d);
    write_f16(block, M, min);
    let level = |value: f32| (c_float_to_int((value - min) * inverse + 0.5) as i8 as i32).min(15) as u8;
    for j in 0..16 {
        block[QS + j] = level(values[j]) | (level(values[j + 16]) << 4);
    }
}

/// Packs 32 five-bit levels as Q5_0 and Q5_1 store them: low nibbles in
/// `qs`, fifth bits in the little-endian u32 at `qh`.
fn pack_five_bit<const BYTES: usize>(levels: &[u8; 32], block: &mut [u8; BYTES], qh: usize, qs: usize) {
    let mut high_bits = 0u32;
    for j in 0..16 {
        let (first, second) = (levels[j], levels[j + 16]);
        block[qs + j] = (first & 0x0F) | ((second & 0x0F) << 4);
        high_bits |= u32::from((first & 0x10) >> 4) << j;
        high_bits |= u32::from((second & 0x10) >> 4) << (j + 16);
    }
    block[qh..qh + 4].copy_from_slice(&high_bits.to_le_bytes());
}

pub(super) fn q5_0(values: &[f32; 32], block: &mut [u8; blocks::q5_0::BYTES]) {
    use blocks::q5_0::{D, QH, QS};
    let d = signed_absolute_max(values) / -16.0;
    let inverse = reciprocal_or_zero(d);
    write_f16(block, D, d);
    let levels: [u8; 32] =
        std::array::from_fn(|j| (c_float_to_int(values[j] * inverse + 16.5) as i8 as i32).min(31) as u8);
    pack_five_bit(&levels, block, QH, QS);
}

pub(super) fn q5_1(values: &[f32; 32], block: &mut [u8; blocks::q5_1::BYTES]) {
    use blocks::q5_1::{D, M, QH, QS};
    let (min, max) = min_max(values);
    let d = (max - min) / 31.0;
    let inverse = reciprocal_or_zero(d);
    write_f16(block, D, d);
    write_f16(block, M, min);
    // No clamp to 31 here: ggml has none, and the level cannot exceed it.
    let levels: [u8; 32] = std::array::from_fn(|j| c_float_to_int((values[j] - min) * inverse + 0.5) as u8);
    pack_five_bit(&levels, block, QH, QS);
}

pub(super) fn q8_0(values: &[f32; 32], block: &mut [u8; blocks::q8_0::BYTES]) {
    use blocks::q8_0::{D, QS};
    let mut absolute_max = 0.0f32;
    for &value in values {
        // ggml's MAX(a, b) is `a > b ? a : b`.
        absolute_max = if absolute_max > value.abs() {
            absolute_max
        } else {
            value.abs()
        };
    }
    let d = absolute_max / 127.0;
    let inverse = reciprocal_or_zero(d);
    write_f16(block, D, d);
    for (byte, &value) in block[QS..].iter_mut().zip(values) {
        // C's roundf: half-way cases away from zero, as f32::round.
        *byte = c_float_to_int((value * inverse).round()) as i8 as u8;
    }
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

/// The shared part of Q4_K and Q5_K: fits each sub-block, packs the 6-bit
/// scales and minimums and the f16 `d`/`dmin` into the block header, and
/// returns each element's level (0..=`nmax`) against the stored scales.
fn quantize_k_header<const BYTES: usize>(
    values: &[f32; 256],
    block: &mut [u8; BYTES],
    nmax: i32,
    rmin: f32,
    nstep: i32,
) -> [u8; 256] {
    use blocks::q4_k::{D, DMIN, SCALES};
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
    let mut packed = [0u8; 12];
    for j in 0..8 {
        let scale = (nearest_int(inverse_scale * scales[j]) as u8).min(63);
        let min = (nearest_int(inverse_min * mins[j]) as u8).min(63);
        if j < 4 {
            packed[j] = scale;
            packed[j + 4] = min;
        } else {
            packed[j + 4] = (scale & 0xF) | ((min & 0xF) << 4);
            packed[j - 4] |= (scale >> 4) << 6;
            packed[j] |= (min >> 4) << 6;
        }
    }
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

pub(super) fn q4_k(values: &[f32; 256], block: &mut [u8; blocks::q4_k::BYTES]) {
    use blocks::q4_k::QS;
    let levels = quantize_k_header(values, block, 15, -1.0, 20);
    for group in 0..4 {
        for l in 0..32 {
            block[QS + 32 * group + l] = levels[64 * group + l] | (levels[64 * group + l + 32] << 4);
        }
    }
}

pub(super) fn q5_k(values: &[f32; 256], block: &mut [u8; blocks::q5_k::BYTES]) {
    use blocks::q5_k::{QH, QS};
    let levels = quantize_k_header(values, block, 31, -0.5, 15);
    let mut high = [0u8; 32];
    for group in 0..4 {
        let first_bit = 1u8 << (2 * group);
        let second_bit = 2u8 << (2 * group);
        for l in 0..32 {
            let mut first = levels[64 * group + l];
            if first > 15 {
                first -= 16;
                high[l] |= first_bit;
            }
            let mut second = levels[64 * group + l + 32];
            if second > 15 {
                second -= 16;
                high[l] |= second_bit;
            }
            block[QS + 32 * group + l] = first | (second << 4);
        }
    }
    block[QH..QH + 32].copy_from_slice(&high);
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

pub(super) fn q6_k(values: &[f32; 256], block: &mut [u8; blocks::q6_k::BYTES]) {
    use blocks::q6_k::{D, QH, QL, SCALES};
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
            block[QH + 32 * half + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even_like_ggml() {
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(3.5), 4);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(-0.49), 0);
        assert_eq!(nearest_int(4_194_303.0), 4_194_303);
        let mut rng = crate::rng::SplitMix64::new(5);
        for _ in 0..10_000 {
            let value = rng.uniform(-5000.0, 5000.0);
            assert_eq!(nearest_int(value), value.round_ties_even() as i32, "{value}");
        }
    }

    #[test]
    fn c_conversion_truncates_and_maps_overflow_to_the_minimum() {
        assert_eq!(c_float_to_int(15.9), 15);
        assert_eq!(c_float_to_int(-0.9), 0);
        assert_eq!(c_float_to_int(f32::INFINITY), i32::MIN);
        assert_eq!(c_float_to_int(f32::NAN), i32::MIN);
        assert_eq!(c_float_to_int(-3e9), i32::MIN);
    }
}
