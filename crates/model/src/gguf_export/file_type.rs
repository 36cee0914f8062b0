//! The file types kscope writes (`--quant`) and the type llama.cpp's
//! `llama-quantize` gives each tensor in them (`llama_tensor_get_type`),
//! the experts' rules included: routers in F32, stacked down projections
//! as dense ones, and an eight-expert model's attention K/V in Q8_0 (and
//! its output projection in Q5_K under Q4_K_M).

use crate::config::{Config, LayerTensor, TensorRole};
use crate::gguf::TensorType;

/// The file types `gen-model --quant` and `kscope quantize` write, named
/// as llama.cpp names them.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgufFileType {
    /// Every tensor in f32.
    F32,
    /// Matrices in f16, vectors in f32.
    F16,
    /// Matrices in bf16, vectors in f32.
    BF16,
    /// Matrices in Q8_0.
    Q8_0,
    /// Matrices in Q4_0, the output matrix in Q6_K.
    Q4_0,
    /// Q4_K, with Q6_K where llama.cpp's Q4_K_M puts it.
    Q4_K_M,
    /// Q5_K, with Q6_K where llama.cpp's Q5_K_M puts it.
    Q5_K_M,
    /// Matrices in Q6_K.
    Q6_K,
}

impl GgufFileType {
    /// The command-line names, in order.
    pub const NAMES: &'static str = "f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m, q6_k";

    /// The file type of a command-line name (any case).
    pub fn parse(text: &str) -> Option<GgufFileType> {
        Some(match text.to_ascii_lowercase().as_str() {
            "f32" => GgufFileType::F32,
            "f16" => GgufFileType::F16,
            "bf16" => GgufFileType::BF16,
            "q8_0" => GgufFileType::Q8_0,
            "q4_0" => GgufFileType::Q4_0,
            "q4_k_m" => GgufFileType::Q4_K_M,
            "q5_k_m" => GgufFileType::Q5_K_M,
            "q6_k" => GgufFileType::Q6_K,
            _ => return None,
        })
    }

    /// llama.cpp's `LLAMA_FTYPE_*` id (`general.file_type`).
    pub(super) fn id(self) -> u32 {
        match self {
            GgufFileType::F32 => 0,
            GgufFileType::F16 => 1,
            GgufFileType::Q4_0 => 2,
            GgufFileType::Q8_0 => 7,
            GgufFileType::Q4_K_M => 15,
            GgufFileType::Q5_K_M => 17,
            GgufFileType::Q6_K => 18,
            GgufFileType::BF16 => 32,
        }
    }

    /// The type of most matrices.
    fn base(self) -> TensorType {
        match self {
            GgufFileType::F32 => TensorType::F32,
            GgufFileType::F16 => TensorType::F16,
            GgufFileType::BF16 => TensorType::BF16,
            GgufFileType::Q8_0 => TensorType::Q8_0,
            GgufFileType::Q4_0 => TensorType::Q4_0,
            GgufFileType::Q4_K_M => TensorType::Q4_K,
            GgufFileType::Q5_K_M => TensorType::Q5_K,
            GgufFileType::Q6_K => TensorType::Q6_K,
        }
    }

    fn quantized(self) -> bool {
        !matches!(self, GgufFileType::F32 | GgufFileType::F16 | GgufFileType::BF16)
    }
}

/// llama.cpp's choice of a few more bits for some layers.
fn use_more_bits(layer: usize, layers: usize) -> bool {
    layer < layers / 8
        || layer >= 7 * layers / 8
        || (layer as isize - (layers / 8) as isize).rem_euclid(3) == 2
}

/// The type `llama-quantize` gives a tensor of `role` whose rows have
/// `columns` elements.
pub(super) fn tensor_type(
    file_type: GgufFileType,
    config: &Config,
    role: TensorRole,
    rank: usize,
    columns: usize,
) -> TensorType {
    // A router stays F32 whatever the file type, as llama.cpp's converter
    // writes it and its quantizer leaves it.
    let router = matches!(
        role,
        TensorRole::Layer {
            tensor: LayerTensor::Router,
            ..
        }
    );
    if rank == 1 || file_type == GgufFileType::F32 || router {
        return TensorType::F32;
    }
    // Eight experts (Mixtral): llama.cpp spends more bits on the attention,
    // which is a small part of such a model.
    let eight_experts = config.experts.as_ref().is_some_and(|experts| experts.count == 8);
    let output =
        matches!(role, TensorRole::LmHead) || (config.tie_word_embeddings && role == TensorRole::Embedding);
    let layers = config.num_layers;
    let chosen = if !file_type.quantized() {
        file_type.base()
    } else if output {
        if file_type == GgufFileType::Q8_0 {
            TensorType::Q8_0
        } else {
            TensorType::Q6_K
        }
    } else {
        match (file_type, role) {
            (
                _,
                TensorRole::Layer {
                    tensor: LayerTensor::KeyProjection | LayerTensor::ValueProjection,
                    ..
                },
            ) if eight_experts => TensorType::Q8_0,
            (
                GgufFileType::Q4_K_M,
                TensorRole::Layer {
                    tensor: LayerTensor::OutputProjection,
                    ..
                },
            ) if eight_experts => TensorType::Q5_K,
            (
                GgufFileType::Q4_K_M | GgufFileType::Q5_K_M,
                TensorRole::Layer {
                    index,
                    tensor:
                        LayerTensor::ValueProjection | LayerTensor::DownProjection | LayerTensor::ExpertDown,
                },
            ) if use_more_bits(index, layers) => TensorType::Q6_K,
            _ => file_type.base(),
        }
    };
    // llama.cpp's fallbacks where rows are not whole blocks of the type.
    if columns.is_multiple_of(chosen.block_elements()) {
        return chosen;
    }
    let fallback = match chosen {
        TensorType::Q4_K => TensorType::Q5_0,
        TensorType::Q5_K => TensorType::Q5_1,
        TensorType::Q6_K => TensorType::Q8_0,
        other => other,
    };
    if columns.is_multiple_of(fallback.block_elements()) {
        fallback
    } else {
        TensorType::F16
    }
}
