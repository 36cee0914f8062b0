//! Block-quantized weight formats as llama.cpp (ggml) stores them in GGUF
//! files: the layout of each block, dequantization, the reference
//! quantizers, and the dot product of a quantized row with an f32 vector.
//! Ops read quantized weights through this module, so a format is written
//! once here and every op and the GGUF loader agree on its bytes.
//!
//! Dequantization is bit-exact with llama.cpp's C (`dequantize_row_*` in
//! ggml-quants.c) and with gguf-py; quantization is byte-identical with
//! llama.cpp's reference quantizers (`quantize_row_*_ref`).
//! tests/quant_formats.rs checks both against fixtures that
//! tools/reference/quant_fixtures.py makes with llama.cpp and gguf-py.
//!
//! ```
//! use kernelscope::quant::QuantFormat;
//!
//! let values: Vec<f32> = (0..256).map(|i| (i as f32 * 0.37).sin()).collect();
//! let format = QuantFormat::Q4_K;
//! let mut blocks = vec![0u8; format.row_bytes(values.len()).unwrap()];
//! format.quantize_row(&values, &mut blocks)?;
//! let mut restored = vec![0.0f32; values.len()];
//! format.dequantize_row(&blocks, &mut restored)?;
//! let dot = format.dot_row(&blocks, &values)?;
//! assert!((dot - restored.iter().zip(&values).map(|(a, b)| a * b).sum::<f32>()).abs() < 1e-3);
//! # Ok::<(), kernelscope::quant::QuantError>(())
//! ```

use std::fmt;

pub mod blocks;
mod dequantize;
mod dot;
mod error;
mod int8;
pub mod planes;
mod quantize;

use dot::dot_blocks;
pub use error::QuantError;
pub use int8::{Int8Activations, quantize_activations};

/// A block-quantized format. Variant names are llama.cpp's own (`Q4_K`),
/// so a user reads the name they know from their file.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantFormat {
    /// 32 elements: an f16 scale and 4-bit values offset by 8.
    Q4_0,
    /// 32 elements: an f16 scale and minimum and 4-bit values.
    Q4_1,
    /// 32 elements: an f16 scale and 5-bit values offset by 16.
    Q5_0,
    /// 32 elements: an f16 scale and minimum and 5-bit values.
    Q5_1,
    /// 32 elements: an f16 scale and 8-bit signed values.
    Q8_0,
    /// 256 elements: 8 sub-blocks of 32 with 6-bit scales and minimums, 4-bit values.
    Q4_K,
    /// 256 elements: 8 sub-blocks of 32 with 6-bit scales and minimums, 5-bit values.
    Q5_K,
    /// 256 elements: 16 sub-blocks of 16 with 8-bit scales, 6-bit values offset by 32.
    Q6_K,
}

impl QuantFormat {
    /// Every format, in ggml's type-id order.
    pub const ALL: [QuantFormat; 8] = [
        QuantFormat::Q4_0,
        QuantFormat::Q4_1,
        QuantFormat::Q5_0,
        QuantFormat::Q5_1,
        QuantFormat::Q8_0,
        QuantFormat::Q4_K,
        QuantFormat::Q5_K,
        QuantFormat::Q6_K,
    ];

    /// Elements one block holds.
    pub const fn block_elements(self) -> usize {
        match self {
            QuantFormat::Q4_0
            | QuantFormat::Q4_1
            | QuantFormat::Q5_0
            | QuantFormat::Q5_1
            | QuantFormat::Q8_0 => 32,
            QuantFormat::Q4_K | QuantFormat::Q5_K | QuantFormat::Q6_K => 256,
        }
    }

    /// Bytes one block takes (ggml's `sizeof(block_*)`).
    pub const fn block_bytes(self) -> usize {
        match self {
            QuantFormat::Q4_0 => 2 + 16,
            QuantFormat::Q4_1 => 2 + 2 + 16,
            QuantFormat::Q5_0 => 2 + 4 + 16,
            QuantFormat::Q5_1 => 2 + 2 + 4 + 16,
            QuantFormat::Q8_0 => 2 + 32,
            QuantFormat::Q4_K => 2 + 2 + 12 + 128,
            QuantFormat::Q5_K => 2 + 2 + 12 + 32 + 128,
            QuantFormat::Q6_K => 128 + 64 + 16 + 2,
        }
    }

    /// ggml's type id (`GGML_TYPE_*`), as GGUF files store it.
    pub const fn ggml_type(self) -> u32 {
        match self {
            QuantFormat::Q4_0 => 2,
            QuantFormat::Q4_1 => 3,
            QuantFormat::Q5_0 => 6,
            QuantFormat::Q5_1 => 7,
            QuantFormat::Q8_0 => 8,
            QuantFormat::Q4_K => 12,
            QuantFormat::Q5_K => 13,
            QuantFormat::Q6_K => 14,
        }
    }

    /// The format of ggml type id `id`, if it is one of these.
    pub fn from_ggml_type(id: u32) -> Option<QuantFormat> {
        QuantFormat::ALL
            .into_iter()
            .find(|format| format.ggml_type() == id)
    }

    /// The lowercase name used in kernel names (`matvec_q4_k_q8`) and on the
    /// command line.
    pub const fn name(self) -> &'static str {
        match self {
            QuantFormat::Q4_0 => "q4_0",
            QuantFormat::Q4_1 => "q4_1",
            QuantFormat::Q5_0 => "q5_0",
            QuantFormat::Q5_1 => "q5_1",
            QuantFormat::Q8_0 => "q8_0",
            QuantFormat::Q4_K => "q4_k",
            QuantFormat::Q5_K => "q5_k",
            QuantFormat::Q6_K => "q6_k",
        }
    }

    /// The name llama.cpp prints (`Q4_K`).
    pub const fn ggml_name(self) -> &'static str {
        match self {
            QuantFormat::Q4_0 => "Q4_0",
            QuantFormat::Q4_1 => "Q4_1",
            QuantFormat::Q5_0 => "Q5_0",
            QuantFormat::Q5_1 => "Q5_1",
            QuantFormat::Q8_0 => "Q8_0",
            QuantFormat::Q4_K => "Q4_K",
            QuantFormat::Q5_K => "Q5_K",
            QuantFormat::Q6_K => "Q6_K",
        }
    }

    /// Bytes of a row of `elements` values, or `None` when `elements` is not
    /// a whole number of blocks (or the size overflows).
    pub fn row_bytes(self, elements: usize) -> Option<usize> {
        if !elements.is_multiple_of(self.block_elements()) {
            return None;
        }
        (elements / self.block_elements()).checked_mul(self.block_bytes())
    }
}

/// Calls the generic `$function::<Codec, BYTES, ELEMENTS>` of `$format`.
macro_rules! for_format {
    ($format:expr, $function:ident($($argument:expr),*)) => {
        match $format {
            QuantFormat::Q4_0 => $function::<Q4_0Codec, { blocks::q4_0::BYTES }, 32>($($argument),*),
            QuantFormat::Q4_1 => $function::<Q4_1Codec, { blocks::q4_1::BYTES }, 32>($($argument),*),
            QuantFormat::Q5_0 => $function::<Q5_0Codec, { blocks::q5_0::BYTES }, 32>($($argument),*),
            QuantFormat::Q5_1 => $function::<Q5_1Codec, { blocks::q5_1::BYTES }, 32>($($argument),*),
            QuantFormat::Q8_0 => $function::<Q8_0Codec, { blocks::q8_0::BYTES }, 32>($($argument),*),
            QuantFormat::Q4_K => $function::<Q4_KCodec, { blocks::q4_k::BYTES }, 256>($($argument),*),
            QuantFormat::Q5_K => $function::<Q5_KCodec, { blocks::q5_k::BYTES }, 256>($($argument),*),
            QuantFormat::Q6_K => $function::<Q6_KCodec, { blocks::q6_k::BYTES }, 256>($($argument),*),
        }
    };
}

impl QuantFormat {
    /// Dequantizes a row: `blocks` holds `out.len()` elements in this
    /// format. Each value is bit-identical to llama.cpp's and gguf-py's.
    ///
    /// # Errors
    ///
    /// [`QuantError`] when `out.len()` is not a whole number of blocks or
    /// `blocks.len()` is not `self.row_bytes(out.len())`; `out` is then
    /// left untouched.
    // Inlined, so that a caller compiled for wider vectors (the CPU's bf16
    // tiles) vectorises the format's loops that wide.
    #[inline(always)]
    pub fn dequantize_row(self, blocks: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
        self.check_lengths(out.len(), blocks.len())?;
        for_format!(self, dequantize_blocks(blocks, out));
        Ok(())
    }

    /// Quantizes a row with llama.cpp's reference quantizer
    /// (`quantize_row_*_ref`, which `llama-quantize` uses when given no
    /// importance matrix, and always for Q8_0): the bytes are identical to llama.cpp's,
    /// and to gguf-py's where gguf-py quantizes (but see the note on
    /// signed zeros below). `out` takes `self.row_bytes(values.len())`
    /// bytes.
    ///
    /// Values are taken as they come: NaN or infinite inputs, or values so
    /// small that a scale's reciprocal overflows, give what llama.cpp's
    /// x86-64 build gives (C leaves some of these conversions undefined).
    ///
    /// gguf-py agrees byte for byte except for the sign of a zero scale or
    /// minimum: an all-zero Q4_0 or Q5_0 block stores d = −0.0 here and in C
    /// (0 / −8), and a Q4_1 or Q5_1 block whose minimum is zero stores the
    /// first zero met, −0.0 or +0.0, where gguf-py's choice differs; the
    /// values those blocks dequantize to are equal.
    ///
    /// # Errors
    ///
    /// [`QuantError`] when `values.len()` is not a whole number of blocks or
    /// `out.len()` is not `self.row_bytes(values.len())`; `out` is then left
    /// untouched.
    pub fn quantize_row(self, values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
        self.check_lengths(values.len(), out.len())?;
        for_format!(self, quantize_blocks(values, out));
        Ok(())
    }

    /// The dot product of a quantized row (`blocks`, holding `x.len()`
    /// elements) with `x`, computed block by block without allocating.
    /// Equal to the dot product of [`dequantize_row`](Self::dequantize_row)'s
    /// output with `x` up to f32 rounding: the sum is kept in eight lanes,
    /// so its rounding differs from a sequential sum's.
    ///
    /// # Errors
    ///
    /// [`QuantError`] when `x.len()` is not a whole number of blocks or
    /// `blocks.len()` is not `self.row_bytes(x.len())`.
    pub fn dot_row(self, blocks: &[u8], x: &[f32]) -> Result<f32, QuantError> {
        self.check_lengths(x.len(), blocks.len())?;
        Ok(for_format!(self, dot_blocks(blocks, x)))
    }

    /// Checks that `elements` values take exactly `bytes` bytes here.
    fn check_lengths(self, elements: usize, bytes: usize) -> Result<(), QuantError> {
        // `row_bytes` fails only on a partial block: a slice is too short
        // for the multiplication to overflow.
        let expected = self.row_bytes(elements).ok_or(QuantError::PartialBlock {
            format: self,
            elements,
        })?;
        if bytes != expected {
            return Err(QuantError::ByteLength {
                format: self,
                elements,
                expected,
                actual: bytes,
            });
        }
        Ok(())
    }
}

/// One format's block codec, sized by const generics so the row loops
/// below hand each block over as a fixed-size array and the per-element
/// indexing inside needs no bounds checks.
trait Codec<const BYTES: usize, const ELEMENTS: usize> {
    fn dequantize(block: &[u8; BYTES], out: &mut [f32; ELEMENTS]);
    fn quantize(values: &[f32; ELEMENTS], block: &mut [u8; BYTES]);
}

macro_rules! codec {
    ($codec:ident, $module:ident, $elements:literal) => {
        // Named after the format as llama.cpp spells it, like the enum.
        #[allow(non_camel_case_types)]
        struct $codec;

        impl Codec<{ blocks::$module::BYTES }, $elements> for $codec {
            #[inline(always)]
            fn dequantize(block: &[u8; blocks::$module::BYTES], out: &mut [f32; $elements]) {
                dequantize::$module(block, out)
            }

            #[inline]
            fn quantize(values: &[f32; $elements], block: &mut [u8; blocks::$module::BYTES]) {
                quantize::$module(values, block)
            }
        }
    };
}

codec!(Q4_0Codec, q4_0, 32);
codec!(Q4_1Codec, q4_1, 32);
codec!(Q5_0Codec, q5_0, 32);
codec!(Q5_1Codec, q5_1, 32);
codec!(Q8_0Codec, q8_0, 32);
codec!(Q4_KCodec, q4_k, 256);
codec!(Q5_KCodec, q5_k, 256);
codec!(Q6_KCodec, q6_k, 256);

/// Dequantizes whole blocks; lengths are checked by the caller.
#[inline(always)]
fn dequantize_blocks<C: Codec<BYTES, ELEMENTS>, const BYTES: usize, const ELEMENTS: usize>(
    blocks: &[u8],
    out: &mut [f32],
) {
    let (blocks, _) = blocks.as_chunks::<BYTES>();
    let (out, _) = out.as_chunks_mut::<ELEMENTS>();
    for (block, out) in blocks.iter().zip(out) {
        C::dequantize(block, out);
    }
}

/// Quantizes whole blocks; lengths are checked by the caller.
fn quantize_blocks<C: Codec<BYTES, ELEMENTS>, const BYTES: usize, const ELEMENTS: usize>(
    values: &[f32],
    out: &mut [u8],
) {
    let (values, _) = values.as_chunks::<ELEMENTS>();
    let (out, _) = out.as_chunks_mut::<BYTES>();
    for (values, block) in values.iter().zip(out) {
        C::quantize(values, block);
    }
}

impl fmt::Display for QuantFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.ggml_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_ids_round_trip_and_sizes_match_ggml() {
        for format in QuantFormat::ALL {
            assert_eq!(QuantFormat::from_ggml_type(format.ggml_type()), Some(format));
        }
        // ggml-common.h's static asserts.
        let sizes: Vec<usize> = QuantFormat::ALL
            .iter()
            .map(|format| format.block_bytes())
            .collect();
        assert_eq!(sizes, [18, 20, 22, 24, 34, 144, 176, 210]);
        assert_eq!(QuantFormat::Q4_K.row_bytes(4096), Some(16 * 144));
        assert_eq!(QuantFormat::Q8_0.row_bytes(33), None);
    }

    #[test]
    fn block_layouts_match_the_block_sizes() {
        let layouts = [
            blocks::q4_0::BYTES,
            blocks::q4_1::BYTES,
            blocks::q5_0::BYTES,
            blocks::q5_1::BYTES,
            blocks::q8_0::BYTES,
            blocks::q4_k::BYTES,
            blocks::q5_k::BYTES,
            blocks::q6_k::BYTES,
        ];
        for (format, bytes) in QuantFormat::ALL.into_iter().zip(layouts) {
            assert_eq!(format.block_bytes(), bytes, "{format}");
        }
        // Each layout's last field ends where the block does.
        assert_eq!(blocks::q4_0::QS + 16, blocks::q4_0::BYTES);
        assert_eq!(blocks::q4_1::QS + 16, blocks::q4_1::BYTES);
        assert_eq!(blocks::q5_0::QS + 16, blocks::q5_0::BYTES);
        assert_eq!(blocks::q5_1::QS + 16, blocks::q5_1::BYTES);
        assert_eq!(blocks::q8_0::QS + 32, blocks::q8_0::BYTES);
        assert_eq!(blocks::q4_k::QS + 128, blocks::q4_k::BYTES);
        assert_eq!(blocks::q5_k::QS + 128, blocks::q5_k::BYTES);
        assert_eq!(blocks::q6_k::D + 2, blocks::q6_k::BYTES);
        assert_eq!(blocks::q5_k::SCALES, blocks::q4_k::SCALES);
    }

    #[test]
    fn scale_min_k4_unpacks_what_the_quantizer_packs() {
        // Pack eight known (scale, min) pairs as quantize_row_q4_K_ref does.
        let pairs: [(u8, u8); 8] = [
            (1, 62),
            (63, 0),
            (17, 33),
            (40, 8),
            (63, 63),
            (5, 48),
            (32, 16),
            (0, 47),
        ];
        let mut packed = [0u8; 12];
        for (j, &(scale, min)) in pairs.iter().enumerate() {
            if j < 4 {
                packed[j] = scale;
                packed[j + 4] = min;
            } else {
                packed[j + 4] = (scale & 0xF) | ((min & 0xF) << 4);
                packed[j - 4] |= (scale >> 4) << 6;
                packed[j] |= (min >> 4) << 6;
            }
        }
        for (j, &pair) in pairs.iter().enumerate() {
            assert_eq!(blocks::scale_min_k4(j, &packed), pair, "sub-block {j}");
        }
    }

    #[test]
    fn lengths_are_checked_before_anything_is_written() {
        let format = QuantFormat::Q4_0;
        let mut out = [7.0f32; 64];
        assert_eq!(
            format.dequantize_row(&[0u8; 35], &mut out),
            Err(QuantError::ByteLength {
                format,
                elements: 64,
                expected: 36,
                actual: 35
            })
        );
        assert_eq!(out, [7.0f32; 64]);
        assert_eq!(
            format.dequantize_row(&[0u8; 18], &mut out[..31]),
            Err(QuantError::PartialBlock { format, elements: 31 })
        );
    }
}
