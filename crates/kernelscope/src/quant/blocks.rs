//! Where each field sits in a block, byte by byte, as ggml-common.h's
//! `block_*` structs lay it out (little-endian, no padding). Public because
//! GPU kernels index the same bytes and must agree with the CPU code on
//! every offset.
//!
//! Scales (`D`, `DMIN`, `M`) are IEEE half floats. Where a block packs two
//! 4-bit values in a byte, the low nibble holds an element of the first
//! half of its group and the high nibble the matching element of the second
//! half, never two neighbours.

use half::f16;

/// Q4_0 (`block_q4_0`): value = d × (nibble − 8).
pub mod q4_0 {
    /// Offset of `d`, the f16 scale.
    pub const D: usize = 0;
    /// Offset of the 16 bytes of nibbles: byte `j` holds elements `j` (low) and `j + 16` (high).
    pub const QS: usize = 2;
    /// Size of a block.
    pub const BYTES: usize = 18;
}

/// Q4_1 (`block_q4_1`): value = d × nibble + m.
pub mod q4_1 {
    /// Offset of `d`, the f16 scale.
    pub const D: usize = 0;
    /// Offset of `m`, the f16 minimum.
    pub const M: usize = 2;
    /// Offset of the 16 bytes of nibbles, laid out as in Q4_0.
    pub const QS: usize = 4;
    /// Size of a block.
    pub const BYTES: usize = 20;
}

/// Q5_0 (`block_q5_0`): value = d × (5-bit value − 16).
pub mod q5_0 {
    /// Offset of `d`, the f16 scale.
    pub const D: usize = 0;
    /// Offset of `qh`, a little-endian u32 whose bit `j` is the fifth bit of element `j`.
    pub const QH: usize = 2;
    /// Offset of the 16 bytes of low nibbles, laid out as in Q4_0.
    pub const QS: usize = 6;
    /// Size of a block.
    pub const BYTES: usize = 22;
}

/// Q5_1 (`block_q5_1`): value = d × 5-bit value + m.
pub mod q5_1 {
    /// Offset of `d`, the f16 scale.
    pub const D: usize = 0;
    /// Offset of `m`, the f16 minimum.
    pub const M: usize = 2;
    /// Offset of `qh`, laid out as in Q5_0.
    pub const QH: usize = 4;
    /// Offset of the 16 bytes of low nibbles, laid out as in Q4_0.
    pub const QS: usize = 8;
    /// Size of a block.
    pub const BYTES: usize = 24;
}

/// Q8_0 (`block_q8_0`): value = d × signed byte.
pub mod q8_0 {
    /// Offset of `d`, the f16 scale.
    pub const D: usize = 0;
    /// Offset of the 32 signed bytes, one per element.
    pub const QS: usize = 2;
    /// Size of a block.
    pub const BYTES: usize = 34;
}

/// Q4_K (`block_q4_K`): 8 sub-blocks of 32; in sub-block `s`,
/// value = d × scale(s) × nibble − dmin × min(s), with `scale` and `min`
/// 6-bit integers unpacked by [`scale_min_k4`].
pub mod q4_k {
    /// Offset of `d`, the f16 super-scale of the sub-block scales.
    pub const D: usize = 0;
    /// Offset of `dmin`, the f16 super-scale of the sub-block minimums.
    pub const DMIN: usize = 2;
    /// Offset of the 12 bytes of packed 6-bit scales and minimums.
    pub const SCALES: usize = 4;
    /// Offset of the 128 bytes of nibbles: for each 64 elements, 32 bytes
    /// hold elements `l` (low) and `l + 32` (high).
    pub const QS: usize = 16;
    /// Size of a block.
    pub const BYTES: usize = 144;
}

/// Q5_K (`block_q5_K`): Q4_K with a fifth bit per element.
pub mod q5_k {
    /// Offset of `d`, the f16 super-scale of the sub-block scales.
    pub const D: usize = 0;
    /// Offset of `dmin`, the f16 super-scale of the sub-block minimums.
    pub const DMIN: usize = 2;
    /// Offset of the 12 bytes of packed 6-bit scales and minimums, as in Q4_K.
    pub const SCALES: usize = 4;
    /// Offset of the 32 bytes of fifth bits: bit `2g` of byte `l` belongs to
    /// element `64g + l`, bit `2g + 1` to element `64g + 32 + l`.
    pub const QH: usize = 16;
    /// Offset of the 128 bytes of low nibbles, laid out as in Q4_K.
    pub const QS: usize = 48;
    /// Size of a block.
    pub const BYTES: usize = 176;
}

/// Q6_K (`block_q6_K`): 16 sub-blocks of 16; in sub-block `s`,
/// value = d × scales\[s\] × (6-bit value − 32).
pub mod q6_k {
    /// Offset of the 128 bytes of low nibbles: in each half of 128
    /// elements, 64 bytes where byte `l` holds elements `l` (low) and
    /// `l + 64` (high).
    pub const QL: usize = 0;
    /// Offset of the 64 bytes of high bit pairs: in each half, byte `l` holds
    /// the pairs of elements `l`, `l + 32`, `l + 64`, `l + 96` from the low bits up.
    pub const QH: usize = 128;
    /// Offset of the 16 signed 8-bit sub-block scales.
    pub const SCALES: usize = 192;
    /// Offset of `d`, the f16 super-scale.
    pub const D: usize = 208;
    /// Size of a block.
    pub const BYTES: usize = 210;
}

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

/// The f16 at `offset` of a block, widened (exactly) to f32.
#[inline]
pub(super) fn read_f16<const BYTES: usize>(block: &[u8; BYTES], offset: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([block[offset], block[offset + 1]])).to_f32()
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

#[cfg(test)]
mod scale_tests {
    use super::{scale_min_k4, scales_mins_k4};

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
