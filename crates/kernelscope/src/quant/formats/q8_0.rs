//! Q8_0 (ggml's `block_q8_0`): 32 elements, an f16 scale and 8-bit signed
//! values; value = d × signed byte. Its integer product meets activations
//! quantized the same way (`block_q8_0`).

use std::mem::offset_of;

use crate::quant::block_format::{BlockFormat, Field, field};
use crate::quant::int8::Int8Activations;
use crate::quant::shared::{c_float_to_int, dot32, read_f16, read_f16_at, reciprocal_or_zero, write_f16};

/// A block as ggml lays it out, field for field.
#[repr(C)]
pub struct Block {
    /// The f16 scale.
    pub d: [u8; 2],
    /// 32 signed bytes, one per element.
    pub qs: [u8; 32],
}

/// Size of a block.
pub const BYTES: usize = size_of::<Block>();
const _: () = assert!(BYTES == 34, "ggml-common.h: sizeof(block_q8_0)");
/// Elements a block holds.
pub const ELEMENTS: usize = 32;
/// Offset of `d`.
pub const D: usize = offset_of!(Block, d);
/// Offset of `qs`.
pub const QS: usize = offset_of!(Block, qs);

/// The format, as the row loops and `QuantFormat` dispatch to it.
#[allow(non_camel_case_types)]
pub(crate) struct Q8_0;

impl BlockFormat<BYTES, ELEMENTS> for Q8_0 {
    const GGML_TYPE: u32 = 8;
    const NAME: &'static str = "q8_0";
    const GGML_NAME: &'static str = "Q8_0";
    const PLANES: &'static [Field] = &[field(QS, 32), field(D, 2)];
    const INT8_BLOCK: Option<usize> = Some(32);

    #[inline(always)]
    fn dequantize(block: &[u8; BYTES], out: &mut [f32; ELEMENTS]) {
        let d = read_f16(block, D);
        for (value, &byte) in out.iter_mut().zip(&block[QS..]) {
            *value = f32::from(byte as i8) * d;
        }
    }

    fn quantize(values: &[f32; ELEMENTS], block: &mut [u8; BYTES]) {
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

    #[inline(always)]
    fn dot_int8(blocks: &[u8], x: &Int8Activations) -> Option<f32> {
        let mut total = 0.0f32;
        for (index, block) in blocks.chunks_exact(BYTES).enumerate() {
            let quants: &[i8; 32] =
                bytemuck::cast_ref(<&[u8; 32]>::try_from(&block[QS..QS + 32]).expect("a block's 32 quants"));
            let sum = dot32(quants, &x.quants[index * 32..index * 32 + 32]);
            total += sum as f32 * (read_f16_at(block, D) * x.scales[index]);
        }
        Some(total)
    }
}
