//! The validated config and what follows from it directly (widths, RoPE's
//! frequencies, the `config.json` it writes back): a file of its own,
//! because every part of `config/` reads it and `mod.rs` only gathers them.

use kernelscope::ops::rope::RopeScaling;

use super::architecture::Architecture;
use super::experts::Experts;

/// A validated model configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The decoder family.
    pub architecture: Architecture,
    /// Vocabulary size (rows of the embedding and of the LM head).
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the gated MLP.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_layers: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads (grouped-query attention when fewer than `num_heads`).
    pub num_kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f32,
    /// RoPE base.
    pub rope_theta: f32,
    /// How RoPE's frequencies are rescaled (linear, Llama 3, YaRN), if at all.
    pub rope_scaling: Option<RopeScaling>,
    /// Per-frequency divisors of RoPE's frequencies, as a GGUF file of
    /// Llama 3.1 stores its scaling (`rope_freqs.weight`, one per pair),
    /// applied after `rope_scaling`.
    pub rope_frequency_factors: Option<Vec<f32>>,
    /// Multiplies RoPE's cos and sin (YaRN's attention factor; 1 otherwise).
    pub rope_attention_scaling: f32,
    /// Maximum positions (context length) the checkpoint declares.
    pub max_position_embeddings: usize,
    /// The sliding-window size when some layer attends through a window.
    /// Sliding-window attention is not implemented, so the usable context
    /// stops at the window, where it and full attention still agree.
    pub sliding_window: Option<usize>,
    /// Whether the LM head reuses the embedding table.
    pub tie_word_embeddings: bool,
    /// Biases on the q/k/v projections (Qwen2, or `attention_bias`).
    pub qkv_bias: bool,
    /// Bias on the output projection (`attention_bias` of Llama, Qwen3).
    pub o_bias: bool,
    /// Each head of q and k RMS-normalised (its own `[head_dim]` weight,
    /// `q_norm` and `k_norm`) before RoPE: Qwen3.
    pub qk_norm: bool,
    /// The mixture of experts of a sparse family (`None` for a dense one).
    pub experts: Option<Experts>,
    /// End-of-sequence token ids.
    pub eos_token_ids: Vec<u32>,
}

impl Config {
    /// The positions a sequence may span: the declared context, or the
    /// sliding window where one is in use (beyond it windowed attention would
    /// differ from the full attention run here).
    pub fn context_length(&self) -> usize {
        match self.sliding_window {
            Some(window) => window.min(self.max_position_embeddings),
            None => self.max_position_embeddings,
        }
    }

    /// The config as Hugging Face `config.json` text, with `torch_dtype`, in
    /// the layout older transformers wrote (top-level `rope_theta` and
    /// `rope_scaling`), which every version reads.
    pub fn to_json(&self, torch_dtype: &str) -> String {
        let mut value = serde_json::json!({
            "architectures": [self.architecture.class_name()],
            "model_type": self.architecture.model_type(),
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "torch_dtype": torch_dtype,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "use_cache": true,
        });
        let object = value.as_object_mut().expect("built as an object");
        let scaling = match self.rope_scaling {
            None => None,
            Some(RopeScaling::Linear { factor }) => Some(serde_json::json!({
                "rope_type": "linear",
                "factor": factor,
            })),
            Some(RopeScaling::Llama3(scaling)) => Some(serde_json::json!({
                "rope_type": "llama3",
                "factor": scaling.factor,
                "low_freq_factor": scaling.low_freq_factor,
                "high_freq_factor": scaling.high_freq_factor,
                "original_max_position_embeddings": scaling.original_max_position_embeddings as u64,
            })),
            Some(RopeScaling::Yarn(scaling)) => Some(serde_json::json!({
                "rope_type": "yarn",
                "factor": scaling.factor,
                "original_max_position_embeddings": scaling.original_max_position_embeddings as u64,
                "beta_fast": scaling.beta_fast,
                "beta_slow": scaling.beta_slow,
                "truncate": scaling.truncate,
                "attention_factor": self.rope_attention_scaling,
            })),
        };
        if let Some(scaling) = scaling {
            object.insert("rope_scaling".into(), scaling);
        }
        if let Some(experts) = &self.experts {
            for (field, value) in experts.json_fields(self.architecture) {
                object.insert(field.into(), value);
            }
        }
        match self.architecture {
            Architecture::Qwen2 => {
                object.insert("use_sliding_window".into(), false.into());
                object.insert("sliding_window".into(), self.max_position_embeddings.into());
            }
            Architecture::Qwen3 | Architecture::Qwen3Moe => {
                object.insert("use_sliding_window".into(), false.into());
                object.insert("sliding_window".into(), serde_json::Value::Null);
                object.insert("attention_bias".into(), (self.qkv_bias && self.o_bias).into());
            }
            _ => {
                object.insert("attention_bias".into(), (self.qkv_bias && self.o_bias).into());
                object.insert("mlp_bias".into(), false.into());
            }
        }
        serde_json::to_string_pretty(&value).expect("plain JSON")
    }

    /// Width of the key and value rows of one position.
    pub fn kv_dim(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }

    /// RoPE's inverse frequencies: the base, rescaled as `rope_scaling`
    /// says, divided by `rope_frequency_factors` where the file gives them.
    pub fn rope_inverse_frequencies(&self) -> Vec<f32> {
        let mut frequencies =
            kernelscope::ops::rope::inverse_frequencies(self.head_dim, self.rope_theta, self.rope_scaling);
        if let Some(factors) = &self.rope_frequency_factors {
            frequencies
                .iter_mut()
                .zip(factors)
                .for_each(|(frequency, factor)| *frequency /= factor);
        }
        frequencies
    }

    /// The attention geometry the ops take.
    pub fn heads(&self) -> kernelscope::ops::attention::Heads {
        kernelscope::ops::attention::Heads {
            query: self.num_heads,
            key_value: self.num_kv_heads,
            dim: self.head_dim,
        }
    }

    /// Width of the concatenated query heads.
    pub fn q_dim(&self) -> usize {
        self.num_heads * self.head_dim
    }

    /// Parameters in the checkpoint (validated configs cannot overflow here).
    pub fn parameter_count(&self) -> usize {
        self.checked_parameter_bytes(1)
            .expect("checked when the config was validated") as usize
    }

    /// Weight elements read per decoded token (every weight once; the
    /// embedding only one row; of a sparse layer's experts only the
    /// `per_token` chosen), for the bandwidth roofline.
    pub fn weight_elements_per_token(&self) -> usize {
        let embedding = self.vocab_size * self.hidden_size;
        let idle_experts = self.experts.as_ref().map_or(0, |experts| {
            let per_expert = 3 * experts.intermediate_size * self.hidden_size;
            experts.sparse_layer_count() * (experts.count - experts.per_token) * per_expert
        });
        let read_once = self.parameter_count() - embedding - idle_experts + self.hidden_size;
        if self.tie_word_embeddings {
            read_once + embedding
        } else {
            read_once
        }
    }
}
