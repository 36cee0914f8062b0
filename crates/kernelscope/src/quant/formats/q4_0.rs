//! Q4_0 (ggml's `block_q4_0`): 32 elements, an f16 scale and 4-bit values
//! offset by 8; value = d × (nibble − 8).

use std::mem::offset_of;

use crate::quant::block_format::{BlockFormat, Field, field};
use crate::quant::shared::{c_float_to_int, read_f16, reciprocal_or_zero, signed_absolute_max, write_f16};

/// A block as ggml lays it out, field for field.
#[repr(C)]
pub struct Block {
    /// The f16 scale.
    pub d: [u8; 2],
    /// 16 bytes of nibbles: byte `j` holds elements `j` (low) and `j + 16` (high).
    pub qs: [u8; 16],
}

/// Size of a block.
pub const BYTES: usize = size_of::<Block>();
const _: () = assert!(BYTES == 18, "ggml-common.h: sizeof(block_q4_0)");
/// Elements a block holds.
pub const ELEMENTS: usize = 32;
/// Offset of `d`.
pub const D: usize = offset_of!(Block, d);
/// Offset of `qs`.
pub const QS: usize = offset_of!(Block, qs);

/// The format, as the row loops and `QuantFormat` dispatch to it.
#[allow(non_camel_case_types)]
pub(crate) struct Q4_0;

impl BlockFormat<BYTES, ELEMENTS> for Q4_0 {
    const GGML_TYPE: u32 = 2;
    const NAME: &'static str = "q4_0";
    const GGML_NAME: &'static str = "Q4_0";
    const PLANES: &'static [Field] = &[field(QS, 16), field(D, 2)];

    #[inline(always)]
    fn dequantize(block: &[u8; BYTES], out: &mut [f32; ELEMENTS]) {
        let d = read_f16(block, D);
        for j in 0..16 {
            let byte = block[QS + j];
            out[j] = (i32::from(byte & 0xF) - 8) as f32 * d;
            out[j + 16] = (i32::from(byte >> 4) - 8) as f32 * d;
        }
    }

    fn quantize(values: &[f32; ELEMENTS], block: &mut [u8; BYTES]) {
        let d = signed_absolute_max(values) / -8.0;
        let inverse = reciprocal_or_zero(d);
        write_f16(block, D, d);
        let level = |value: f32| (c_float_to_int(value * inverse + 8.5) as i8 as i32).min(15) as u8;
        for j in 0..16 {
            block[QS + j] = level(values[j]) | (level(values[j + 16]) << 4);
        }
    }
}
