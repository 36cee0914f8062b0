//! One block of each format to f32, as ggml's `dequantize_row_*` computes
//! it: the same products in the same order, so every value is bit-identical
//! to llama.cpp's (built without fused multiply-add) and to gguf-py's.

use super::blocks::{self, read_f16, scale_min_k4};

#[inline(always)]
pub(super) fn q4_0(block: &[u8; blocks::q4_0::BYTES], out: &mut [f32; 32]) {
    use blocks::q4_0::{D, QS};
    let d = read_f16(block, D);
    for j in 0..16 {
        let byte = block[QS + j];
        out[j] = (i32::from(byte & 0xF) - 8) as f32 * d;
        out[j + 16] = (i32::from(byte >> 4) - 8) as f32 * d;
    }
}

#[inline(always)]
pub(super) fn q4_1(block: &[u8; blocks::q4_1::BYTES], out: &mut [f32; 32]) {
    use blocks::q4_1::{D, M, QS};
    let d = read_f16(block, D);
    let m = read_f16(block, M);
    for j in 0..16 {
        let byte = block[QS + j];
        out[j] = f32::from(byte & 0xF) * d + m;
        out[j + 16] = f32::from(byte >> 4) * d + m;
    }
}

/// The fifth bits of a Q5_0 or Q5_1 block, bit `j` for element `j`.
fn fifth_bits<const BYTES: usize>(block: &[u8; BYTES], offset: usize) -> u32 {
    u32::from_le_bytes([
        block[offset],
        block[offset + 1],
        block[offset + 2],
        block[offset + 3],
    ])
}

/// The 5-bit values of elements `j` and `j + 16` of a Q5_0 or Q5_1 block.
fn five_bit_pair(low_nibbles: u8, high_bits: u32, j: usize) -> (u8, u8) {
    let first = (low_nibbles & 0xF) | ((((high_bits >> j) << 4) & 0x10) as u8);
    let second = (low_nibbles >> 4) | (((high_bits >> (j + 12)) & 0x10) as u8);
    (first, second)
}

#[inline(always)]
pub(super) fn q5_0(block: &[u8; blocks::q5_0::BYTES], out: &mut [f32; 32]) {
    use blocks::q5_0::{D, QH, QS};
    let d = read_f16(block, D);
    let high_bits = fifth_bits(block, QH);
    for j in 0..16 {
        let (first, second) = five_bit_pair(block[QS + j], high_bits, j);
        out[j] = (i32::from(first) - 16) as f32 * d;
        out[j + 16] = (i32::from(second) - 16) as f32 * d;
    }
}

#[inline(always)]
pub(super) fn q5_1(block: &[u8; blocks::q5_1::BYTES], out: &mut [f32; 32]) {
    use blocks::q5_1::{D, M, QH, QS};
    let d = read_f16(block, D);
    let m = read_f16(block, M);
    let high_bits = fifth_bits(block, QH);
    for j in 0..16 {
        let (first, second) = five_bit_pair(block[QS + j], high_bits, j);
        out[j] = f32::from(first) * d + m;
        out[j + 16] = f32::from(second) * d + m;
    }
}

#[inline(always)]
pub(super) fn q8_0(block: &[u8; blocks::q8_0::BYTES], out: &mut [f32; 32]) {
    use blocks::q8_0::{D, QS};
    let d = read_f16(block, D);
    for (value, &byte) in out.iter_mut().zip(&block[QS..]) {
        *value = f32::from(byte as i8) * d;
    }
}

/// The scales and minimums of a Q4_K or Q5_K block, multiplied out:
/// `(d × scale, dmin × min)` per sub-block.
#[inline(always)]
fn k_sub_block_scales<const BYTES: usize>(block: &[u8; BYTES]) -> [(f32, f32); 8] {
    // Q4_K and Q5_K share the header, so either's offsets do.
    use blocks::q4_k::{D, DMIN, SCALES};
    let d = read_f16(block, D);
    let dmin = read_f16(block, DMIN);
    let packed: &[u8; 12] = block[SCALES..SCALES + 12].try_into().expect("12 bytes of scales");
    std::array::from_fn(|sub_block| {
        let (scale, min) = scale_min_k4(sub_block, packed);
        (d * f32::from(scale), dmin * f32::from(min))
    })
}

#[inline(always)]
pub(super) fn q4_k(block: &[u8; blocks::q4_k::BYTES], out: &mut [f32; 256]) {
    use blocks::q4_k::QS;
    let scales = k_sub_block_scales(block);
    for group in 0..4 {
        let (d1, m1) = scales[2 * group];
        let (d2, m2) = scales[2 * group + 1];
        let q = &block[QS + 32 * group..QS + 32 * group + 32];
        let out = &mut out[64 * group..64 * group + 64];
        for l in 0..32 {
            out[l] = d1 * f32::from(q[l] & 0xF) - m1;
            out[l + 32] = d2 * f32::from(q[l] >> 4) - m2;
        }
    }
}

#[inline(always)]
pub(super) fn q5_k(block: &[u8; blocks::q5_k::BYTES], out: &mut [f32; 256]) {
    use blocks::q5_k::{QH, QS};
    let scales = k_sub_block_scales(block);
    let high = &block[QH..QH + 32];
    for group in 0..4 {
        let (d1, m1) = scales[2 * group];
        let (d2, m2) = scales[2 * group + 1];
        let first_bit = 1u8 << (2 * group);
        let second_bit = 2u8 << (2 * group);
        let low = &block[QS + 32 * group..QS + 32 * group + 32];
        let out = &mut out[64 * group..64 * group + 64];
        for l in 0..32 {
            let first = (low[l] & 0xF) + if high[l] & first_bit != 0 { 16 } else { 0 };
            let second = (low[l] >> 4) + if high[l] & second_bit != 0 { 16 } else { 0 };
            out[l] = d1 * f32::from(first) - m1;
            out[l + 32] = d2 * f32::from(second) - m2;
        }
    }
}

#[inline(always)]
pub(super) fn q6_k(block: &[u8; blocks::q6_k::BYTES], out: &mut [f32; 256]) {
    use blocks::q6_k::{D, QH, QL, SCALES};
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
