//! Q4_1 (ggml's `block_q4_1`): 32 elements, an f16 scale and minimum and
//! 4-bit values; value = d × nibble + m.

use std::mem::offset_of;

use crate::quant::block_format::{BlockFormat, Field, field};
use crate::quant::shared::{c_float_to_int, min_max, read_f16, reciprocal_or_zero, write_f16};

/// A block as ggml lays it out, field for field.
#[repr(C)]
pub struct Block {
    /// The f16 scale.
    pub d: [u8; 2],
    /// The f16 minimum.
    pub m: [u8; 2],
    /// 16 bytes of nibbles, laid out as in Q4_0.
    pub qs: [u8; 16],
}

/// Size of a block.
pub const BYTES: usize = size_of::<Block>();
const _: () = assert!(BYTES == 20, "ggml-common.h: sizeof(block_q4_1)");
/// Elements a block holds.
pub const ELEMENTS: usize = 32;
/// Offset of `d`.
pub const D: usize = offset_of!(Block, d);
/// Offset of `m`.
pub const M: usize = offset_of!(Block, m);
/// Offset of `qs`.
pub const QS: usize = offset_of!(Block, qs);

/// The format, as the row loops and `QuantFormat` dispatch to it.
#[allow(non_camel_case_types)]
pub(crate) struct Q4_1;

impl BlockFormat<BYTES, ELEMENTS> for Q4_1 {
    const GGML_TYPE: u32 = 3;
    const NAME: &'static str = "q4_1";
    const GGML_NAME: &'static str = "Q4_1";
    // d and m are adjacent: one 4-byte plane.
    const PLANES: &'static [Field] = &[field(QS, 16), field(D, 4)];

    #[inline(always)]
    fn dequantize(block: &[u8; BYTES], out: &mut [f32; ELEMENTS]) {
        let d = read_f16(block, D);
        let m = read_f16(block, M);
        for j in 0..16 {
            let byte = block[QS + j];
            out[j] = f32::from(byte & 0xF) * d + m;
            out[j + 16] = f32::from(byte >> 4) * d + m;
        }
    }

    fn quantize(values: &[f32; ELEMENTS], block: &mut [u8; BYTES]) {
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
}
