//! `config.json`: the subset of Hugging Face's Llama/Qwen2/Mistral config the
//! engine needs, validated once so the rest of the code can trust it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};

/// The decoder families the engine runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Architecture {
    /// `LlamaForCausalLM` (Llama 2/3, TinyLlama, SmolLM).
    #[serde(rename = "LlamaForCausalLM")]
    Llama,
    /// `Qwen2ForCausalLM`: biases on the q/k/v projections.
    #[serde(rename = "Qwen2ForCausalLM")]
    Qwen2,
    /// `MistralForCausalLM`, without sliding-window attention.
    #[serde(rename = "MistralForCausalLM")]
    Mistral,
}

impl Architecture {
    /// The Hugging Face class name.
    pub fn class_name(self) -> &'static str {
        match self {
            Architecture::Llama => "LlamaForCausalLM",
            Architecture::Qwen2 => "Qwen2ForCausalLM",
            Architecture::Mistral => "MistralForCausalLM",
        }
    }

    /// The `model_type` field.
    pub fn model_type(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
            Architecture::Mistral => "mistral",
        }
    }
}

/// Llama-3 `rope_scaling` (`rope_type: "llama3"`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RopeScaling {
    /// `factor`.
    pub factor: f32,
    /// `low_freq_factor`.
    pub low_freq_factor: f32,
    /// `high_freq_factor`.
    pub high_freq_factor: f32,
    /// `original_max_position_embeddings`.
    pub original_max_position_embeddings: usize,
}

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
    /// Llama-3 RoPE scaling, if any.
    pub rope_scaling: Option<RopeScaling>,
    /// Maximum positions (context length).
    pub max_position_embeddings: usize,
    /// Whether the LM head reuses the embedding table.
    pub tie_word_embeddings: bool,
    /// Biases on the q/k/v projections (Qwen2, or `attention_bias`).
    pub qkv_bias: bool,
    /// Bias on the output projection (`attention_bias` of Llama).
    pub o_bias: bool,
    /// End-of-sequence token ids.
    pub eos_token_ids: Vec<u32>,
}

#[derive(Deserialize)]
struct RawRopeScaling {
    rope_type: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    factor: Option<f32>,
    low_freq_factor: Option<f32>,
    high_freq_factor: Option<f32>,
    original_max_position_embeddings: Option<usize>,
}

#[derive(Deserialize)]
struct RawConfig {
    architectures: Option<Vec<String>>,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: Option<f32>,
    rope_theta: Option<f32>,
    rope_scaling: Option<RawRopeScaling>,
    max_position_embeddings: usize,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    sliding_window: Option<usize>,
    use_sliding_window: Option<bool>,
    eos_token_id: Option<serde_json::Value>,
}

impl Config {
    /// Reads and validates `directory/config.json`.
    pub fn from_directory(directory: &Path) -> Result<Config> {
        let path = directory.join("config.json");
        if !path.is_file() {
            return Err(ModelError::ConfigMissing {
                path: directory.to_path_buf(),
            });
        }
        let text = std::fs::read_to_string(&path).map_err(|source| ModelError::Io {
            path: path.clone(),
            source,
        })?;
        Self::from_json(&text, &path)
    }

    /// Parses and validates config JSON (`path` only names it in errors).
    pub fn from_json(text: &str, path: &Path) -> Result<Config> {
        let invalid = |problem: String| ModelError::ConfigInvalid {
            path: path.to_path_buf(),
            problem,
        };
        let raw: RawConfig =
            serde_json::from_str(text).map_err(|error| invalid(format!("malformed config.json: {error}")))?;
        let class = raw
            .architectures
            .as_ref()
            .and_then(|list| list.first())
            .ok_or_else(|| invalid("config.json has no `architectures` entry".into()))?;
        let architecture = match class.as_str() {
            "LlamaForCausalLM" => Architecture::Llama,
            "Qwen2ForCausalLM" => Architecture::Qwen2,
            "MistralForCausalLM" => Architecture::Mistral,
            other => {
                return Err(ModelError::UnsupportedArchitecture {
                    path: path.to_path_buf(),
                    architecture: other.to_string(),
                });
            }
        };
        let num_kv_heads = raw.num_key_value_heads.unwrap_or(raw.num_attention_heads);
        if raw.num_attention_heads == 0
            || num_kv_heads == 0
            || !raw.num_attention_heads.is_multiple_of(num_kv_heads)
        {
            return Err(invalid(format!(
                "num_attention_heads ({}) must be a positive multiple of num_key_value_heads ({num_kv_heads})",
                raw.num_attention_heads
            )));
        }
        let head_dim = raw.head_dim.unwrap_or(raw.hidden_size / raw.num_attention_heads);
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(invalid(format!(
                "head_dim must be even and positive, found {head_dim}"
            )));
        }
        for (name, value) in [
            ("vocab_size", raw.vocab_size),
            ("hidden_size", raw.hidden_size),
            ("intermediate_size", raw.intermediate_size),
            ("num_hidden_layers", raw.num_hidden_layers),
            ("max_position_embeddings", raw.max_position_embeddings),
        ] {
            if value == 0 {
                return Err(invalid(format!("{name} must be positive")));
            }
        }
        if raw.mlp_bias == Some(true) {
            return Err(invalid("mlp_bias = true is not supported".into()));
        }
        let sliding = match architecture {
            Architecture::Qwen2 => raw.use_sliding_window == Some(true),
            _ => raw
                .sliding_window
                .is_some_and(|window| window < raw.max_position_embeddings),
        };
        if sliding {
            return Err(invalid("sliding-window attention is not supported".into()));
        }
        let rope_scaling = match raw.rope_scaling {
            None => None,
            Some(scaling) => {
                let kind = scaling.rope_type.or(scaling.kind).unwrap_or_default();
                if kind != "llama3" {
                    return Err(invalid(format!(
                        "rope_scaling of type `{kind}` is not supported (only llama3)"
                    )));
                }
                let field = |value: Option<f32>, name: &str| {
                    value.ok_or_else(|| invalid(format!("rope_scaling is missing `{name}`")))
                };
                Some(RopeScaling {
                    factor: field(scaling.factor, "factor")?,
                    low_freq_factor: field(scaling.low_freq_factor, "low_freq_factor")?,
                    high_freq_factor: field(scaling.high_freq_factor, "high_freq_factor")?,
                    original_max_position_embeddings: scaling.original_max_position_embeddings.ok_or_else(
                        || invalid("rope_scaling is missing `original_max_position_embeddings`".into()),
                    )?,
                })
            }
        };
        let eos_token_ids = match raw.eos_token_id {
            Some(serde_json::Value::Number(number)) => {
                number.as_u64().map(|id| vec![id as u32]).unwrap_or_default()
            }
            Some(serde_json::Value::Array(ids)) => ids
                .iter()
                .filter_map(|id| id.as_u64())
                .map(|id| id as u32)
                .collect(),
            _ => Vec::new(),
        };
        let attention_bias = raw.attention_bias.unwrap_or(false);
        Ok(Config {
            architecture,
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_layers: raw.num_hidden_layers,
            num_heads: raw.num_attention_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: raw.rms_norm_eps.unwrap_or(1e-6),
            rope_theta: raw.rope_theta.unwrap_or(10_000.0),
            rope_scaling,
            max_position_embeddings: raw.max_position_embeddings,
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(false),
            qkv_bias: architecture == Architecture::Qwen2 || attention_bias,
            o_bias: architecture != Architecture::Qwen2 && attention_bias,
            eos_token_ids,
        })
    }

    /// The config as Hugging Face `config.json` text, with `torch_dtype`.
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
        if let Some(scaling) = self.rope_scaling {
            object.insert(
                "rope_scaling".into(),
                serde_json::json!({
                    "rope_type": "llama3",
                    "factor": scaling.factor,
                    "low_freq_factor": scaling.low_freq_factor,
                    "high_freq_factor": scaling.high_freq_factor,
                    "original_max_position_embeddings": scaling.original_max_position_embeddings,
                }),
            );
        }
        match self.architecture {
            Architecture::Qwen2 => {
                object.insert("use_sliding_window".into(), false.into());
                object.insert("sliding_window".into(), self.max_position_embeddings.into());
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

    /// Width of the concatenated query heads.
    pub fn q_dim(&self) -> usize {
        self.num_heads * self.head_dim
    }

    /// Every tensor the checkpoint must hold, with its shape, in a fixed order.
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let (hidden, inter, q, kv) = (
            self.hidden_size,
            self.intermediate_size,
            self.q_dim(),
            self.kv_dim(),
        );
        let mut tensors = vec![(
            "model.embed_tokens.weight".to_string(),
            vec![self.vocab_size, hidden],
        )];
        for layer in 0..self.num_layers {
            let name = |suffix: &str| format!("model.layers.{layer}.{suffix}");
            tensors.push((name("input_layernorm.weight"), vec![hidden]));
            tensors.push((name("self_attn.q_proj.weight"), vec![q, hidden]));
            tensors.push((name("self_attn.k_proj.weight"), vec![kv, hidden]));
            tensors.push((name("self_attn.v_proj.weight"), vec![kv, hidden]));
            if self.qkv_bias {
                tensors.push((name("self_attn.q_proj.bias"), vec![q]));
                tensors.push((name("self_attn.k_proj.bias"), vec![kv]));
                tensors.push((name("self_attn.v_proj.bias"), vec![kv]));
            }
            tensors.push((name("self_attn.o_proj.weight"), vec![hidden, q]));
            if self.o_bias {
                tensors.push((name("self_attn.o_proj.bias"), vec![hidden]));
            }
            tensors.push((name("post_attention_layernorm.weight"), vec![hidden]));
            tensors.push((name("mlp.gate_proj.weight"), vec![inter, hidden]));
            tensors.push((name("mlp.up_proj.weight"), vec![inter, hidden]));
            tensors.push((name("mlp.down_proj.weight"), vec![hidden, inter]));
        }
        tensors.push(("model.norm.weight".to_string(), vec![hidden]));
        if !self.tie_word_embeddings {
            tensors.push(("lm_head.weight".to_string(), vec![self.vocab_size, hidden]));
        }
        tensors
    }

    /// Parameters in the checkpoint.
    pub fn parameter_count(&self) -> usize {
        self.tensor_shapes()
            .iter()
            .map(|(_, shape)| shape.iter().product::<usize>())
            .sum()
    }

    /// Weight elements read per decoded token (every weight once; the
    /// embedding only one row), for the bandwidth roofline.
    pub fn weight_elements_per_token(&self) -> usize {
        let embedding = self.vocab_size * self.hidden_size;
        let read_once = self.parameter_count() - embedding + self.hidden_size;
        if self.tie_word_embeddings {
            read_once + embedding
        } else {
            read_once
        }
    }
}
