//! The list of block formats, one line each, and [`QuantFormat`], made
//! from it: every property of a format and every row loop reaches the
//! format's own file (`q4_k.rs`: its block layout with a compile-time size
//! check, dequantize, quantize, planes and integer product, behind
//! [`BlockFormat`]) through the matches the list generates. A new format is
//! a new file here, its `mod` line and its line in the list.

pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;

use std::fmt;

use super::block_format::{BlockFormat, Field, dequantize_blocks, dot_blocks, quantize_blocks};
use super::int8::Int8Activations;

/// Makes [`QuantFormat`] from the list: one variant per line, each with
/// its documentation, dispatching to the struct of the same name in the
/// module named on the line.
macro_rules! formats {
    ($($(#[$documentation:meta])* $variant:ident => $module:ident,)*) => {
        /// A block-quantized format. Variant names are llama.cpp's own
        /// (`Q4_K`), so a user reads the name they know from their file.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum QuantFormat {
            $($(#[$documentation])* $variant,)*
        }

        impl QuantFormat {
            /// Every format, in ggml's type-id order.
            pub const ALL: [QuantFormat; [$(stringify!($variant)),*].len()] = [$(QuantFormat::$variant),*];

            /// Elements one block holds.
            pub const fn block_elements(self) -> usize {
                match self {
                    $(QuantFormat::$variant => $module::ELEMENTS,)*
                }
            }

            /// Bytes one block takes (ggml's `sizeof(block_*)`).
            pub const fn block_bytes(self) -> usize {
                match self {
                    $(QuantFormat::$variant => $module::BYTES,)*
                }
            }

            /// ggml's type id (`GGML_TYPE_*`), as GGUF files store it.
            pub const fn ggml_type(self) -> u32 {
                match self {
                    $(QuantFormat::$variant => {
                        <$module::$variant as BlockFormat<{ $module::BYTES }, { $module::ELEMENTS }>>::GGML_TYPE
                    })*
                }
            }

            /// The lowercase name used in kernel names (`matvec_q4_k_q8`)
            /// and on the command line.
            pub const fn name(self) -> &'static str {
                match self {
                    $(QuantFormat::$variant => {
                        <$module::$variant as BlockFormat<{ $module::BYTES }, { $module::ELEMENTS }>>::NAME
                    })*
                }
            }

            /// The name llama.cpp prints (`Q4_K`).
            pub const fn ggml_name(self) -> &'static str {
                match self {
                    $(QuantFormat::$variant => {
                        <$module::$variant as BlockFormat<{ $module::BYTES }, { $module::ELEMENTS }>>::GGML_NAME
                    })*
                }
            }

            /// The fields of a block in the order their planes follow one
            /// another in a GPU row (`quant::planes`).
            pub const fn planes(self) -> &'static [Field] {
                match self {
                    $(QuantFormat::$variant => {
                        <$module::$variant as BlockFormat<{ $module::BYTES }, { $module::ELEMENTS }>>::PLANES
                    })*
                }
            }

            /// The activation block size this format's integer product
            /// takes, or `None` where it has none yet (its products stay in
            /// f32).
            pub const fn int8_block(self) -> Option<usize> {
                match self {
                    $(QuantFormat::$variant => {
                        <$module::$variant as BlockFormat<{ $module::BYTES }, { $module::ELEMENTS }>>::INT8_BLOCK
                    })*
                }
            }

            /// `Σ weight[i] × activation[i]` of a row of blocks with
            /// activations quantized by
            /// [`quantize_activations`](super::quantize_activations) for
            /// this format's block, or `None` where the format has no
            /// integer product. The caller has checked that `blocks` holds
            /// exactly the row.
            #[inline(always)]
            pub fn dot_row_int8(self, blocks: &[u8], x: &Int8Activations) -> Option<f32> {
                match self {
                    $(QuantFormat::$variant => {
                        <$module::$variant as BlockFormat<{ $module::BYTES }, { $module::ELEMENTS }>>::dot_int8(blocks, x)
                    })*
                }
            }

            /// Dequantizes whole blocks; the caller has checked the lengths.
            // Inlined, so that a caller compiled for wider vectors (the
            // CPU's bf16 tiles) vectorises the format's loops that wide.
            #[inline(always)]
            pub(crate) fn dequantize_checked(self, blocks: &[u8], out: &mut [f32]) {
                match self {
                    $(QuantFormat::$variant => {
                        dequantize_blocks::<$module::$variant, { $module::BYTES }, { $module::ELEMENTS }>(blocks, out)
                    })*
                }
            }

            /// Quantizes whole blocks; the caller has checked the lengths.
            pub(crate) fn quantize_checked(self, values: &[f32], out: &mut [u8]) {
                match self {
                    $(QuantFormat::$variant => {
                        quantize_blocks::<$module::$variant, { $module::BYTES }, { $module::ELEMENTS }>(values, out)
                    })*
                }
            }

            /// The f32 dot product of whole blocks with `x`; the caller has
            /// checked the lengths.
            pub(crate) fn dot_checked(self, blocks: &[u8], x: &[f32]) -> f32 {
                match self {
                    $(QuantFormat::$variant => {
                        dot_blocks::<$module::$variant, { $module::BYTES }, { $module::ELEMENTS }>(blocks, x)
                    })*
                }
            }
        }
    };
}

formats! {
    /// 32 elements: an f16 scale and 4-bit values offset by 8.
    Q4_0 => q4_0,
    /// 32 elements: an f16 scale and minimum and 4-bit values.
    Q4_1 => q4_1,
    /// 32 elements: an f16 scale and 5-bit values offset by 16.
    Q5_0 => q5_0,
    /// 32 elements: an f16 scale and minimum and 5-bit values.
    Q5_1 => q5_1,
    /// 32 elements: an f16 scale and 8-bit signed values.
    Q8_0 => q8_0,
    /// 256 elements: 8 sub-blocks of 32 with 6-bit scales and minimums, 4-bit values.
    Q4_K => q4_k,
    /// 256 elements: 8 sub-blocks of 32 with 6-bit scales and minimums, 5-bit values.
    Q5_K => q5_k,
    /// 256 elements: 16 sub-blocks of 16 with 8-bit scales, 6-bit values offset by 32.
    Q6_K => q6_k,
}

impl QuantFormat {
    /// The format of ggml type id `id`, if it is one of these.
    pub fn from_ggml_type(id: u32) -> Option<QuantFormat> {
        QuantFormat::ALL
            .into_iter()
            .find(|format| format.ggml_type() == id)
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
            assert_eq!(format.ggml_name().to_lowercase(), format.name(), "{format}");
            assert_eq!(
                format!("{format:?}"),
                format.ggml_name(),
                "the variant is llama.cpp's name"
            );
        }
        // ggml-common.h's static asserts (each file checks its own at compile time too).
        let sizes: Vec<usize> = QuantFormat::ALL
            .iter()
            .map(|format| format.block_bytes())
            .collect();
        assert_eq!(sizes, [18, 20, 22, 24, 34, 144, 176, 210]);
        let ids: Vec<u32> = QuantFormat::ALL.iter().map(|format| format.ggml_type()).collect();
        assert!(ids.is_sorted(), "ALL is in ggml's type-id order: {ids:?}");
        assert_eq!(QuantFormat::Q4_K.row_bytes(4096), Some(16 * 144));
        assert_eq!(QuantFormat::Q8_0.row_bytes(33), None);
    }

    #[test]
    fn a_format_with_an_integer_product_says_its_activation_block() {
        let mut rng = crate::rng::SplitMix64::new(0x1e7);
        for format in QuantFormat::ALL {
            let elements = 256;
            let blocks: Vec<u8> = (0..format.row_bytes(elements).unwrap())
                .map(|_| rng.next_u64() as u8)
                .collect();
            let x: Vec<f32> = (0..elements).map(|_| rng.uniform(-1.0, 1.0)).collect();
            let mut activations = Int8Activations::default();
            if let Some(block) = format.int8_block() {
                super::super::quantize_activations(&x, block, &mut activations);
            }
            assert_eq!(
                format.dot_row_int8(&blocks, &activations).is_some(),
                format.int8_block().is_some(),
                "{format}: INT8_BLOCK and dot_int8 disagree"
            );
        }
    }
}
