//! Block-quantized weight formats as llama.cpp (ggml) stores them in GGUF
//! files: the layout of each block, dequantization, the reference
//! quantizers, and the dot product of a quantized row with an f32 vector.
//! Ops read quantized weights through this module, so a format is written
//! once here and every op and the GGUF loader agree on its bytes.

use std::fmt;

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

    /// The lowercase name used in kernel names (`matvec_q4_k`) and on the
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
}
