//! Q5_K (ggml's `block_q5_K`): Q4_K with a fifth bit per element: 256
//! elements in 8 sub-blocks of 32 under the shared K header
//! (`quant::k_scales`); value = d × scale(s) × q − dmin × min(s).

use std::mem::offset_of;

use crate::quant::block_format::{BlockFormat, Field, field};
use crate::quant::k_scales;

/// A block as ggml lays it out, field for field.
#[repr(C)]
pub struct Block {
    /// The f16 super-scale of the sub-block scales.
    pub d: [u8; 2],
    /// The f16 super-scale of the sub-block minimums.
    pub dmin: [u8; 2],
    /// 12 bytes of packed 6-bit scales and minimums, as in Q4_K.
    pub scales: [u8; 12],
    /// 32 bytes of fifth bits: bit `2g` of byte `l` belongs to element
    /// `64g + l`, bit `2g + 1` to element `64g + 32 + l`.
    pub qh: [u8; 32],
    /// 128 bytes of low nibbles, laid out as in Q4_K.
    pub qs: [u8; 128],
}

/// Size of a block.
pub const BYTES: usize = size_of::<Block>();
const _: () = assert!(BYTES == 176, "ggml-common.h: sizeof(block_q5_K)");
/// Elements a block holds.
pub const ELEMENTS: usize = 256;
/// Offset of `d`.
pub const D: usize = offset_of!(Block, d);
/// Offset of `dmin`.
pub const DMIN: usize = offset_of!(Block, dmin);
/// Offset of `scales`.
pub const SCALES: usize = offset_of!(Block, scales);
/// Offset of `qh`.
pub const QH: usize = offset_of!(Block, qh);
/// Offset of `qs`.
pub const QS: usize = offset_of!(Block, qs);
const _: () = assert!(
    D == k_scales::D && DMIN == k_scales::DMIN && SCALES == k_scales::SCALES && QH == k_scales::HEADER_BYTES,
    "the K header's layout"
);

/// The format, as the row loops and `QuantFormat` dispatch to it.
#[allow(non_camel_case_types)]
pub(crate) struct Q5_K;

impl BlockFormat<BYTES, ELEMENTS> for Q5_K {
    const GGML_TYPE: u32 = 13;
    const NAME: &'static str = "q5_k";
    const GGML_NAME: &'static str = "Q5_K";
    // d and dmin are adjacent: one 4-byte plane.
    const PLANES: &'static [Field] = &[field(QS, 128), field(QH, 32), field(SCALES, 12), field(D, 4)];

    #[inline(always)]
    fn dequantize(block: &[u8; BYTES], out: &mut [f32; ELEMENTS]) {
        let scales = k_scales::sub_block_scales(block);
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

    fn quantize(values: &[f32; ELEMENTS], block: &mut [u8; BYTES]) {
        let levels = k_scales::quantize_header(values, block, 31, -0.5, 15);
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
}
