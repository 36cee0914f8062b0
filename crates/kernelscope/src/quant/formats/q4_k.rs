//! Q4_K (ggml's `block_q4_K`): 256 elements in 8 sub-blocks of 32, each
//! with a 6-bit scale and minimum (the shared K header, `quant::k_scales`);
//! in sub-block `s`, value = d × scale(s) × nibble − dmin × min(s). Its
//! integer product meets activations quantized to `block_q8_K`.

use std::mem::offset_of;

use crate::quant::block_format::{BlockFormat, Field, field};
use crate::quant::int8::Int8Activations;
use crate::quant::k_scales::{self, scale_min_k4};
use crate::quant::shared::{dot32, read_f16_at};

/// A block as ggml lays it out, field for field.
#[repr(C)]
pub struct Block {
    /// The f16 super-scale of the sub-block scales.
    pub d: [u8; 2],
    /// The f16 super-scale of the sub-block minimums.
    pub dmin: [u8; 2],
    /// 12 bytes of packed 6-bit scales and minimums.
    pub scales: [u8; 12],
    /// 128 bytes of nibbles: for each 64 elements, 32 bytes hold elements
    /// `l` (low) and `l + 32` (high).
    pub qs: [u8; 128],
}

/// Size of a block.
pub const BYTES: usize = size_of::<Block>();
const _: () = assert!(BYTES == 144, "ggml-common.h: sizeof(block_q4_K)");
/// Elements a block holds.
pub const ELEMENTS: usize = 256;
/// Offset of `d`.
pub const D: usize = offset_of!(Block, d);
/// Offset of `dmin`.
pub const DMIN: usize = offset_of!(Block, dmin);
/// Offset of `scales`.
pub const SCALES: usize = offset_of!(Block, scales);
/// Offset of `qs`.
pub const QS: usize = offset_of!(Block, qs);
const _: () = assert!(
    D == k_scales::D && DMIN == k_scales::DMIN && SCALES == k_scales::SCALES && QS == k_scales::HEADER_BYTES,
    "the K header's layout"
);

/// The format, as the row loops and `QuantFormat` dispatch to it.
#[allow(non_camel_case_types)]
pub(crate) struct Q4_K;

impl BlockFormat<BYTES, ELEMENTS> for Q4_K {
    const GGML_TYPE: u32 = 12;
    const NAME: &'static str = "q4_k";
    const GGML_NAME: &'static str = "Q4_K";
    // d and dmin are adjacent: one 4-byte plane.
    const PLANES: &'static [Field] = &[field(QS, 128), field(SCALES, 12), field(D, 4)];
    const INT8_BLOCK: Option<usize> = Some(256);

    #[inline(always)]
    fn dequantize(block: &[u8; BYTES], out: &mut [f32; ELEMENTS]) {
        let scales = k_scales::sub_block_scales(block);
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

    fn quantize(values: &[f32; ELEMENTS], block: &mut [u8; BYTES]) {
        let levels = k_scales::quantize_header(values, block, 15, -1.0, 20);
        for group in 0..4 {
            for l in 0..32 {
                block[QS + 32 * group + l] = levels[64 * group + l] | (levels[64 * group + l + 32] << 4);
            }
        }
    }

    #[inline(always)]
    fn dot_int8(blocks: &[u8], x: &Int8Activations) -> Option<f32> {
        let mut total = 0.0f32;
        for (index, block) in blocks.chunks_exact(BYTES).enumerate() {
            let activations = &x.quants[index * 256..index * 256 + 256];
            let packed: &[u8; 12] = block[SCALES..SCALES + 12].try_into().expect("12 bytes");
            let nibbles = &block[QS..QS + 128];
            let (mut scaled, mut minimums) = (0i32, 0i32);
            for sub_block in 0..8 {
                let (scale, minimum) = scale_min_k4(sub_block, packed);
                // Sub-blocks 2g and 2g + 1 share 32 bytes: low then high nibbles.
                let bytes = &nibbles[(sub_block / 2) * 32..(sub_block / 2) * 32 + 32];
                let mut values = [0i8; 32];
                for (value, &byte) in values.iter_mut().zip(bytes) {
                    *value = if sub_block % 2 == 0 {
                        (byte & 0x0F) as i8
                    } else {
                        (byte >> 4) as i8
                    };
                }
                let sum = dot32(&values, &activations[sub_block * 32..sub_block * 32 + 32]);
                scaled += i32::from(scale) * sum;
                minimums += i32::from(minimum)
                    * (x.sums[index * 16 + 2 * sub_block] + x.sums[index * 16 + 2 * sub_block + 1]);
            }
            let scale = x.scales[index];
            total += read_f16_at(block, D) * scale * scaled as f32
                - read_f16_at(block, DMIN) * scale * minimums as f32;
        }
        Some(total)
    }
}
