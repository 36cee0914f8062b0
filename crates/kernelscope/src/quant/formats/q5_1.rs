//! Q5_1 (ggml's `block_q5_1`): 32 elements, an f16 scale and minimum and
//! 5-bit values; value = d × 5-bit value + m.

use std::mem::offset_of;

use crate::quant::block_format::{BlockFormat, Field, field};
use crate::quant::shared::{
    c_float_to_int, fifth_bits, five_bit_pair, min_max, pack_five_bit, read_f16, reciprocal_or_zero,
    write_f16,
};

/// A block as ggml lays it out, field for field.
#[repr(C)]
pub struct Block {
    /// The f16 scale.
    pub d: [u8; 2],
    /// The f16 minimum.
    pub m: [u8; 2],
    /// The fifth bits, laid out as in Q5_0.
    pub qh: [u8; 4],
    /// 16 bytes of low nibbles, laid out as in Q4_0.
    pub qs: [u8; 16],
}

/// Size of a block.
pub const BYTES: usize = size_of::<Block>();
const _: () = assert!(BYTES == 24, "ggml-common.h: sizeof(block_q5_1)");
/// Elements a block holds.
pub const ELEMENTS: usize = 32;
/// Offset of `d`.
pub const D: usize = offset_of!(Block, d);
/// Offset of `m`.
pub const M: usize = offset_of!(Block, m);
/// Offset of `qh`.
pub const QH: usize = offset_of!(Block, qh);
/// Offset of `qs`.
pub const QS: usize = offset_of!(Block, qs);

/// The format, as the row loops and `QuantFormat` dispatch to it.
#[allow(non_camel_case_types)]
pub(crate) struct Q5_1;

impl BlockFormat<BYTES, ELEMENTS> for Q5_1 {
    const GGML_TYPE: u32 = 7;
    const NAME: &'static str = "q5_1";
    const GGML_NAME: &'static str = "Q5_1";
    // d and m are adjacent: one 4-byte plane.
    const PLANES: &'static [Field] = &[field(QS, 16), field(QH, 4), field(D, 4)];

    #[inline(always)]
    fn dequantize(block: &[u8; BYTES], out: &mut [f32; ELEMENTS]) {
        let d = read_f16(block, D);
        let m = read_f16(block, M);
        let high_bits = fifth_bits(block, QH);
        for j in 0..16 {
            let (first, second) = five_bit_pair(block[QS + j], high_bits, j);
            out[j] = f32::from(first) * d + m;
            out[j + 16] = f32::from(second) * d + m;
        }
    }

    fn quantize(values: &[f32; ELEMENTS], block: &mut [u8; BYTES]) {
        let (min, max) = min_max(values);
        let d = (max - min) / 31.0;
        let inverse = reciprocal_or_zero(d);
        write_f16(block, D, d);
        write_f16(block, M, min);
        // No clamp to 31 here: ggml has none, and the level cannot exceed it.
        let levels: [u8; 32] =
            std::array::from_fn(|j| c_float_to_int((values[j] - min) * inverse + 0.5) as u8);
        pack_five_bit(&levels, block, QH, QS);
    }
}
