//! ggml's tensor types as GGUF files store them: every type id llama.cpp
//! knows, with the block sizes that fix a tensor's byte length, so a file's
//! tensors are checked whatever their type; and which of them this engine
//! runs.

use std::fmt;
use std::path::Path;

use kernelscope::DType;
use kernelscope::ops::WeightFormat;
use kernelscope::quant::QuantFormat;

use crate::error::{ModelError, Result, shown};

/// A tensor's element type, by ggml's type id (`GGML_TYPE_*` in ggml.h).
/// Variant names are llama.cpp's (`Q4_K`, `IQ2_XXS`), as users see them.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorType {
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
    /// 4-bit blocks of 32 with a scale.
    Q4_0,
    /// 4-bit blocks of 32 with a scale and minimum.
    Q4_1,
    /// 5-bit blocks of 32 with a scale.
    Q5_0,
    /// 5-bit blocks of 32 with a scale and minimum.
    Q5_1,
    /// 8-bit blocks of 32 with a scale.
    Q8_0,
    /// 8-bit blocks of 32 with a scale and sum (activations only).
    Q8_1,
    /// 2-bit super-blocks of 256.
    Q2_K,
    /// 3-bit super-blocks of 256.
    Q3_K,
    /// 4-bit super-blocks of 256.
    Q4_K,
    /// 5-bit super-blocks of 256.
    Q5_K,
    /// 6-bit super-blocks of 256.
    Q6_K,
    /// 8-bit super-blocks of 256 (activations only).
    Q8_K,
    /// Importance-matrix 2.06 bits per weight.
    IQ2_XXS,
    /// Importance-matrix 2.31 bits per weight.
    IQ2_XS,
    /// Importance-matrix 3.06 bits per weight.
    IQ3_XXS,
    /// Importance-matrix 1.56 bits per weight.
    IQ1_S,
    /// Importance-matrix 4.5 bits per weight, non-linear, blocks of 32.
    IQ4_NL,
    /// Importance-matrix 3.44 bits per weight.
    IQ3_S,
    /// Importance-matrix 2.5 bits per weight.
    IQ2_S,
    /// Importance-matrix 4.25 bits per weight, non-linear.
    IQ4_XS,
    /// 8-bit integer.
    I8,
    /// 16-bit integer.
    I16,
    /// 32-bit integer.
    I32,
    /// 64-bit integer.
    I64,
    /// 64-bit float.
    F64,
    /// Importance-matrix 1.75 bits per weight.
    IQ1_M,
    /// bfloat16.
    BF16,
    /// Ternary, 1.69 bits per weight.
    TQ1_0,
    /// Ternary, 2.06 bits per weight.
    TQ2_0,
    /// Microscaling FP4: blocks of 32 with an E8M0 scale.
    MXFP4,
    /// NVIDIA FP4: blocks of 64 with E4M3 scales.
    NVFP4,
    /// 1-bit blocks of 128.
    Q1_0,
    /// 2-bit blocks of 64.
    Q2_0,
}

/// One row of ggml's `type_traits` (ggml/src/ggml.c): id, name, elements per
/// block, bytes per block (`sizeof(block_*)` from ggml-common.h, measured
/// with the C compiler: gguf-py 0.19's table says 40 for Q8_1, ggml's
/// struct is 36).
struct Traits {
    tensor_type: TensorType,
    id: u32,
    name: &'static str,
    block_elements: u32,
    block_bytes: u32,
}

const fn traits(
    tensor_type: TensorType,
    id: u32,
    name: &'static str,
    block_elements: u32,
    block_bytes: u32,
) -> Traits {
    Traits {
        tensor_type,
        id,
        name,
        block_elements,
        block_bytes,
    }
}

/// Every type in ggml's id order.
const TABLE: [Traits; 35] = [
    traits(TensorType::F32, 0, "F32", 1, 4),
    traits(TensorType::F16, 1, "F16", 1, 2),
    traits(TensorType::Q4_0, 2, "Q4_0", 32, 18),
    traits(TensorType::Q4_1, 3, "Q4_1", 32, 20),
    traits(TensorType::Q5_0, 6, "Q5_0", 32, 22),
    traits(TensorType::Q5_1, 7, "Q5_1", 32, 24),
    traits(TensorType::Q8_0, 8, "Q8_0", 32, 34),
    traits(TensorType::Q8_1, 9, "Q8_1", 32, 36),
    traits(TensorType::Q2_K, 10, "Q2_K", 256, 84),
    traits(TensorType::Q3_K, 11, "Q3_K", 256, 110),
    traits(TensorType::Q4_K, 12, "Q4_K", 256, 144),
    traits(TensorType::Q5_K, 13, "Q5_K", 256, 176),
    traits(TensorType::Q6_K, 14, "Q6_K", 256, 210),
    traits(TensorType::Q8_K, 15, "Q8_K", 256, 292),
    traits(TensorType::IQ2_XXS, 16, "IQ2_XXS", 256, 66),
    traits(TensorType::IQ2_XS, 17, "IQ2_XS", 256, 74),
    traits(TensorType::IQ3_XXS, 18, "IQ3_XXS", 256, 98),
    traits(TensorType::IQ1_S, 19, "IQ1_S", 256, 50),
    traits(TensorType::IQ4_NL, 20, "IQ4_NL", 32, 18),
    traits(TensorType::IQ3_S, 21, "IQ3_S", 256, 110),
    traits(TensorType::IQ2_S, 22, "IQ2_S", 256, 82),
    traits(TensorType::IQ4_XS, 23, "IQ4_XS", 256, 136),
    traits(TensorType::I8, 24, "I8", 1, 1),
    traits(TensorType::I16, 25, "I16", 1, 2),
    traits(TensorType::I32, 26, "I32", 1, 4),
    traits(TensorType::I64, 27, "I64", 1, 8),
    traits(TensorType::F64, 28, "F64", 1, 8),
    traits(TensorType::IQ1_M, 29, "IQ1_M", 256, 56),
    traits(TensorType::BF16, 30, "BF16", 1, 2),
    traits(TensorType::TQ1_0, 34, "TQ1_0", 256, 54),
    traits(TensorType::TQ2_0, 35, "TQ2_0", 256, 66),
    traits(TensorType::MXFP4, 39, "MXFP4", 32, 17),
    traits(TensorType::NVFP4, 40, "NVFP4", 64, 36),
    traits(TensorType::Q1_0, 41, "Q1_0", 128, 18),
    traits(TensorType::Q2_0, 42, "Q2_0", 64, 18),
];

/// Ids ggml once used and dropped from GGUF files (blocks of size 0 in its
/// table): named in errors so a user knows the file is from an old or
/// repacking tool rather than corrupt.
const REMOVED: [(u32, &str); 8] = [
    (4, "Q4_2"),
    (5, "Q4_3"),
    (31, "Q4_0_4_4"),
    (32, "Q4_0_4_8"),
    (33, "Q4_0_8_8"),
    (36, "IQ4_NL_4_4"),
    (37, "IQ4_NL_4_8"),
    (38, "IQ4_NL_8_8"),
];

impl TensorType {
    /// Every type, in ggml's id order.
    pub const ALL: [TensorType; 35] = {
        let mut all = [TensorType::F32; 35];
        let mut index = 0;
        while index < TABLE.len() {
            all[index] = TABLE[index].tensor_type;
            index += 1;
        }
        all
    };

    const fn traits(self) -> &'static Traits {
        // The table is in declaration order, so the discriminant indexes it
        // (the unit test checks).
        &TABLE[self as usize]
    }

    /// The type of ggml id `id`, if ggml has one.
    pub fn from_ggml_type(id: u32) -> Option<TensorType> {
        TABLE.iter().find(|row| row.id == id).map(|row| row.tensor_type)
    }

    /// ggml's id, as GGUF files store it.
    pub const fn ggml_type(self) -> u32 {
        self.traits().id
    }

    /// The name llama.cpp and gguf-py print (`Q4_K`, `BF16`).
    pub const fn name(self) -> &'static str {
        self.traits().name
    }

    /// Elements one block holds (1 for plain types).
    pub const fn block_elements(self) -> usize {
        self.traits().block_elements as usize
    }

    /// Bytes one block takes.
    pub const fn block_bytes(self) -> usize {
        self.traits().block_bytes as usize
    }

    /// Bytes of `elements` values, or `None` when they are not a whole
    /// number of blocks or the size overflows.
    pub fn byte_len(self, elements: u64) -> Option<u64> {
        let block_elements = self.block_elements() as u64;
        if !elements.is_multiple_of(block_elements) {
            return None;
        }
        (elements / block_elements).checked_mul(self.block_bytes() as u64)
    }

    /// How the engine reads this type, if it does: F32, F16 and BF16
    /// densely, and the block formats of [`QuantFormat`].
    pub fn format(self) -> Option<WeightFormat> {
        match self {
            TensorType::F32 => Some(WeightFormat::Dense(DType::F32)),
            TensorType::F16 => Some(WeightFormat::Dense(DType::F16)),
            TensorType::BF16 => Some(WeightFormat::Dense(DType::BF16)),
            _ => QuantFormat::from_ggml_type(self.ggml_type()).map(WeightFormat::Quantized),
        }
    }

    /// [`TensorType::format`], or the error naming the tensor (`tensor`, in
    /// the file at `path`) and this type when the engine does not run it.
    pub fn supported_format(self, path: &Path, tensor: &str) -> Result<WeightFormat> {
        self.format().ok_or_else(|| ModelError::GgufUnsupportedType {
            path: path.to_path_buf(),
            tensor: shown(tensor),
            type_name: self.name(),
            supported: supported_names(),
        })
    }
}

/// `F32, F16, BF16, Q4_0, ...`: the types the engine runs, for messages.
fn supported_names() -> String {
    TensorType::ALL
        .iter()
        .filter(|tensor_type| tensor_type.format().is_some())
        .map(|tensor_type| tensor_type.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What an id that is no type of ggml's is, for the error that refuses it.
pub(crate) fn describe_unknown_type(id: u32) -> String {
    match REMOVED.iter().find(|(removed, _)| *removed == id) {
        Some((_, name)) => format!(
            "type {id} ({name}), which llama.cpp removed from GGUF files (requantize it with a current llama.cpp)"
        ),
        None => format!("unknown ggml type {id}"),
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_declaration_order_and_ids_round_trip() {
        for (index, row) in TABLE.iter().enumerate() {
            assert_eq!(row.tensor_type as usize, index, "{}", row.name);
            assert_eq!(TensorType::from_ggml_type(row.id), Some(row.tensor_type));
            assert_eq!(format!("{:?}", row.tensor_type), row.name);
        }
        for (id, _) in REMOVED {
            assert_eq!(TensorType::from_ggml_type(id), None);
        }
        assert_eq!(TensorType::from_ggml_type(43), None);
    }

    #[test]
    fn quantized_formats_agree_with_the_runtime() {
        for format in QuantFormat::ALL {
            let tensor_type = TensorType::from_ggml_type(format.ggml_type()).unwrap();
            assert_eq!(tensor_type.block_elements(), format.block_elements());
            assert_eq!(tensor_type.block_bytes(), format.block_bytes());
            assert_eq!(tensor_type.name(), format.ggml_name());
            assert_eq!(tensor_type.format(), Some(WeightFormat::Quantized(format)));
        }
        assert_eq!(TensorType::BF16.format(), Some(WeightFormat::Dense(DType::BF16)));
        assert_eq!(TensorType::IQ2_XXS.format(), None);
    }

    #[test]
    fn byte_lengths_need_whole_blocks() {
        assert_eq!(TensorType::Q4_K.byte_len(512), Some(288));
        assert_eq!(TensorType::Q4_K.byte_len(100), None);
        assert_eq!(TensorType::F32.byte_len(u64::MAX), None);
        assert_eq!(TensorType::I8.byte_len(u64::MAX), Some(u64::MAX));
    }

    #[test]
    fn unsupported_types_are_refused_by_name() {
        let error = TensorType::IQ2_XXS
            .supported_format(Path::new("m.gguf"), "blk.0.ffn_up.weight")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("blk.0.ffn_up.weight") && error.contains("IQ2_XXS"),
            "{error}"
        );
        assert!(describe_unknown_type(31).contains("Q4_0_4_4"));
    }
}
