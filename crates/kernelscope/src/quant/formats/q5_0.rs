//! Q5_0 (ggml's `block_q5_0`): 32 elements, an f16 scale and 5-bit values
//! offset by 16; value = d × (5-bit value − 16).

use std::mem::offset_of;

use crate::quant::block_format::{BlockFormat, Field, field};
use crate::quant::shared::{
    c_float_to_int, fifth_bits, five_bit_pair, pack_five_bit, read_f16, reciprocal_or_zero,
    signed_absolute_max, write_f16,
};

/// A block as ggml lays it out, field for field.
#[repr(C)]
pub struct Block {
    /// The f16 scale.
    pub d: [u8; 2],
    /// A little-endian u32 whose bit `j` is the fifth bit of element `j`.
    pub qh: [u8; 4],
    /// 16 bytes of low nibbles, laid out as in Q4_0.
    pub qs: [u8; 16],
}

/// Size of a block.
pub const BYTES: usize = size_of::<Block>();
const _: () = assert!(BYTES == 22, "ggml-common.h: sizeof(block_q5_0)");
/// Elements a block holds.
pub const ELEMENTS: usize = 32;
/// Offset of `d`.
pub const D: usize = offset_of!(Block, d);
/// Offset of `qh`.
pub const QH: usize = offset_of!(Block, qh);
/// Offset of `qs`.
pub const QS: usize = offset_of!(Block, qs);

/// The format, as the row loops and `QuantFormat` dispatch to it.
#[allow(non_camel_case_types)]
pub(crate) struct Q5_0;

impl BlockFormat<BYTES, ELEMENTS> for Q5_0 {
    const GGML_TYPE: u32 = 6;
    const NAME: &'static str = "q5_0";
    const GGML_NAME: &'static str = "Q5_0";
    const PLANES: &'static [Field] = &[field(QS, 16), field(QH, 4), field(D, 2)];

    #[inline(always)]
    fn dequantize(block: &[u8; BYTES], out: &mut [f32; ELEMENTS]) {
        let d = read_f16(block, D);
        let high_bits = fifth_bits(block, QH);
        for j in 0..16 {
            let (first, second) = five_bit_pair(block[QS + j], high_bits, j);
            out[j] = (i32::from(first) - 16) as f32 * d;
            out[j + 16] = (i32::from(second) - 16) as f32 * d;
        }
    }

    fn quantize(values: &[f32; ELEMENTS], block: &mut [u8; BYTES]) {
        let d = signed_absolute_max(values) / -16.0;
        let inverse = reciprocal_or_zero(d);
        write_f16(block, D, d);
        let levels: [u8; 32] =
            std::array::from_fn(|j| (c_float_to_int(values[j] * inverse + 16.5) as i8 as i32).min(31) as u8);
        pack_five_bit(&levels, block, QH, QS);
    }
}
