//! What several formats' files share: f16 fields read and written as ggml
//! does, ggml's rounding and C's float-to-integer conversion (which decide
//! the quantizers' bytes), the range scans of the 32-element quantizers,
//! the 5-bit packing of Q5_0 and Q5_1, and the exact 32-wide integer dot of
//! the integer products.

use half::f16;

/// ggml's `GROUP_MAX_EPS`: below this a group counts as all zeros.
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;

/// The f16 at `offset` of a block, widened (exactly) to f32.
#[inline]
pub(super) fn read_f16<const BYTES: usize>(block: &[u8; BYTES], offset: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([block[offset], block[offset + 1]])).to_f32()
}

/// The f16 at `bytes[at..at + 2]` of a row slice, widened to f32.
#[inline(always)]
pub(super) fn read_f16_at(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

/// Stores `value` rounded to the nearest f16 (ties to even, as ggml's
/// `GGML_FP32_TO_FP16`) at `offset`, and returns what was stored, widened
/// back, since the quantizers go on with the rounded scale as ggml does.
#[inline]
pub(super) fn write_f16<const BYTES: usize>(block: &mut [u8; BYTES], offset: usize, value: f32) -> f32 {
    let half = f16::from_f32(value);
    block[offset..offset + 2].copy_from_slice(&half.to_bits().to_le_bytes());
    half.to_f32()
}

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
pub(super) fn c_float_to_int(value: f32) -> i32 {
    if (-2_147_483_648.0..2_147_483_648.0).contains(&value) {
        value as i32
    } else {
        i32::MIN
    }
}

/// The value of largest magnitude, sign kept (the first of equals).
pub(super) fn signed_absolute_max(values: &[f32]) -> f32 {
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
pub(super) fn min_max(values: &[f32]) -> (f32, f32) {
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
pub(super) fn reciprocal_or_zero(d: f32) -> f32 {
    if d != 0.0 { 1.0 / d } else { 0.0 }
}

/// The fifth bits of a Q5_0 or Q5_1 block, bit `j` for element `j`.
pub(super) fn fifth_bits<const BYTES: usize>(block: &[u8; BYTES], offset: usize) -> u32 {
    u32::from_le_bytes([
        block[offset],
        block[offset + 1],
        block[offset + 2],
        block[offset + 3],
    ])
}

/// The 5-bit values of elements `j` and `j + 16` of a Q5_0 or Q5_1 block.
pub(super) fn five_bit_pair(low_nibbles: u8, high_bits: u32, j: usize) -> (u8, u8) {
    let first = (low_nibbles & 0xF) | ((((high_bits >> j) << 4) & 0x10) as u8);
    let second = (low_nibbles >> 4) | (((high_bits >> (j + 12)) & 0x10) as u8);
    (first, second)
}

/// Packs 32 five-bit levels as Q5_0 and Q5_1 store them: low nibbles in
/// `qs`, fifth bits in the little-endian u32 at `qh`.
pub(super) fn pack_five_bit<const BYTES: usize>(
    levels: &[u8; 32],
    block: &mut [u8; BYTES],
    qh: usize,
    qs: usize,
) {
    let mut high_bits = 0u32;
    for j in 0..16 {
        let (first, second) = (levels[j], levels[j + 16]);
        block[qs + j] = (first & 0x0F) | ((second & 0x0F) << 4);
        high_bits |= u32::from((first & 0x10) >> 4) << j;
        high_bits |= u32::from((second & 0x10) >> 4) << (j + 16);
    }
    block[qh..qh + 4].copy_from_slice(&high_bits.to_le_bytes());
}

/// `Σ a[i] × b[i]` of 32 signed bytes, exactly.
#[inline(always)]
pub(super) fn dot32(a: &[i8; 32], b: &[i8]) -> i32 {
    let b: &[i8; 32] = b.try_into().expect("32 quants");
    let mut sum = 0i32;
    for i in 0..32 {
        sum += i32::from(a[i]) * i32::from(b[i]);
    }
    sum
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
