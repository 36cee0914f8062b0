//! The decoder families the engine runs: a file of its own, because the
//! config, its experts and the tensor lists all ask which family a model is.

use serde::{Deserialize, Serialize};

/// The decoder families the engine runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Architecture {
    /// `LlamaForCausalLM` (Llama 2/3, TinyLlama, SmolLM).
    #[serde(rename = "LlamaForCausalLM")]
    Llama,
    /// `Qwen2ForCausalLM`: biases on the q/k/v projections.
    #[serde(rename = "Qwen2ForCausalLM")]
    Qwen2,
    /// `Qwen3ForCausalLM`: each head of q and k RMS-normalised before
    /// RoPE, no biases unless `attention_bias`, an explicit `head_dim`.
    #[serde(rename = "Qwen3ForCausalLM")]
    Qwen3,
    /// `MistralForCausalLM`, without sliding-window attention.
    #[serde(rename = "MistralForCausalLM")]
    Mistral,
    /// `Qwen3MoeForCausalLM`: Qwen3's attention, and layers whose MLP is a
    /// mixture of experts (softmax router, top-k, `norm_topk_prob`).
    #[serde(rename = "Qwen3MoeForCausalLM")]
    Qwen3Moe,
    /// `MixtralForCausalLM`: Mistral's attention, every MLP a mixture of
    /// experts (top-2 of 8, weights renormalised over the chosen).
    #[serde(rename = "MixtralForCausalLM")]
    Mixtral,
}

impl Architecture {
    /// The Hugging Face class name.
    pub fn class_name(self) -> &'static str {
        match self {
            Architecture::Llama => "LlamaForCausalLM",
            Architecture::Qwen2 => "Qwen2ForCausalLM",
            Architecture::Qwen3 => "Qwen3ForCausalLM",
            Architecture::Mistral => "MistralForCausalLM",
            Architecture::Qwen3Moe => "Qwen3MoeForCausalLM",
            Architecture::Mixtral => "MixtralForCausalLM",
        }
    }

    /// The `model_type` field.
    pub fn model_type(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
            Architecture::Mistral => "mistral",
            Architecture::Qwen3Moe => "qwen3_moe",
            Architecture::Mixtral => "mixtral",
        }
    }

    /// Whether the family's MLPs are mixtures of experts.
    pub fn has_experts(self) -> bool {
        matches!(self, Architecture::Qwen3Moe | Architecture::Mixtral)
    }
}
