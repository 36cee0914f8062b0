//! Reading and validating `config.json`: what the engine can run is
//! accepted, everything else refused by name, never defaulted.
//!
//! Refused by name, never defaulted, is every field that changes the math
//! and is not implemented: `mlp_bias` = true, a `partial_rotary_factor`
//! other than 1, a `hidden_act` other than silu, `quantization_config`,
//! per-layer-type rope parameters, other families' fields
//! (`attn_logit_softcapping`, ...), and RoPE types other than default,
//! linear, llama3 and yarn (`rope.rs`). A sliding window in use
//! (`sliding_window`, Qwen2's `use_sliding_window` with `max_window_layers`,
//! or `layer_types`) is not implemented either: the usable context then stops
//! at the window, where windowed and full attention agree
//! (`Config::context_length`). Every number that reaches the math is checked
//! (dimensions and layer count bounded, θ and ε positive and finite in f32,
//! every `eos_token_id` below `vocab_size`).

use std::path::Path;

use kernelscope::ops::rope::{RopeScaling, inverse_frequencies};
use serde_json::Value;

use super::architecture::Architecture;
use super::fields::{Fields, short};
use super::limits::{MAX_CONFIG_BYTES, MAX_DIMENSION, MAX_LAYERS};
use super::model_config::Config;
use crate::error::{ModelError, Result, one_line, shown};

/// Fields of other model families that change the math. None of them has
/// a meaning in the architectures run here, so a config that sets one
/// is not what it claims to be, and is refused rather than run without it.
const FOREIGN_MATH_FIELDS: [&str; 13] = [
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "query_pre_attn_scalar",
    "embedding_multiplier",
    "residual_multiplier",
    "attention_multiplier",
    "logits_scaling",
    "logit_scale",
    "use_qk_norm",
    "qk_layernorm",
    "no_rope_layers",
    "attention_chunk_size",
    "use_parallel_residual",
];

impl Config {
    /// Reads and validates `directory/config.json`.
    pub fn from_directory(directory: &Path) -> Result<Config> {
        let path = directory.join("config.json");
        if !path.exists() {
            return Err(ModelError::ConfigMissing {
                path: directory.to_path_buf(),
            });
        }
        let bytes = crate::files::read_regular_file(&path, MAX_CONFIG_BYTES)?;
        let text = String::from_utf8(bytes).map_err(|_| ModelError::ConfigInvalid {
            path: path.clone(),
            problem: "config.json is not UTF-8 text".into(),
        })?;
        Self::from_json(&text, &path)
    }

    /// Parses and validates config JSON (`path` only names it in errors).
    ///
    /// Both layouts are read: transformers 5 writes `rope_parameters` and
    /// `dtype`, older versions top-level `rope_theta`, `rope_scaling` and
    /// `torch_dtype`. A file may carry both; `rope_parameters` is then the
    /// source, and the old fields must say the same or the file is refused.
    /// Fields that change the math and are not implemented are refused by
    /// name, never defaulted.
    pub fn from_json(text: &str, path: &Path) -> Result<Config> {
        let invalid = |problem: String| ModelError::ConfigInvalid {
            path: path.to_path_buf(),
            problem,
        };
        let value: Value = serde_json::from_str(text)
            .map_err(|error| invalid(format!("malformed config.json: {}", one_line(&error.to_string()))))?;
        if let Some(key) = super::duplicates::first_repeated_key(text) {
            return Err(invalid(format!(
                "`{key}` is given twice (JSON keeps the last, silently): say it once"
            )));
        }
        let map = value
            .as_object()
            .ok_or_else(|| invalid("config.json must hold a JSON object".into()))?;
        let fields = Fields {
            map,
            prefix: "",
            path,
        };
        // What the model is, what it must not use, then its numbers: a file
        // with several faults is refused for the first of them, always the same.
        let (architecture, class) = Self::architecture(&fields)?;
        Self::refuse_unimplemented(&fields, class)?;
        let dimensions = Dimensions::read(&fields)?;
        let rms_norm_eps = fields.positive("rms_norm_eps")?.unwrap_or(1e-6);
        let rope = Self::rope(&fields, dimensions.max_position_embeddings, path)?;
        let rope_theta = rope.theta.unwrap_or(10_000.0);
        Self::check_rope_frequencies(&fields, dimensions.head_dim, rope_theta, rope.scaling)?;
        let sliding_window = Self::sliding_window(&fields, architecture, dimensions.num_layers, path)?;
        let attention_bias = Self::attention_bias(&fields, architecture)?;
        let experts = super::experts::read(
            &fields,
            architecture,
            class,
            dimensions.num_layers,
            dimensions.intermediate_size,
        )?;
        let eos_token_ids = Self::token_ids(&fields, "eos_token_id", dimensions.vocab_size)?;
        Self::check_dtype_fields(&fields)?;

        let config = Config {
            architecture,
            vocab_size: dimensions.vocab_size,
            hidden_size: dimensions.hidden_size,
            intermediate_size: dimensions.intermediate_size,
            num_layers: dimensions.num_layers,
            num_heads: dimensions.num_heads,
            num_kv_heads: dimensions.num_kv_heads,
            head_dim: dimensions.head_dim,
            rms_norm_eps,
            rope_theta,
            rope_scaling: rope.scaling,
            rope_attention_scaling: rope.attention_scaling,
            max_position_embeddings: dimensions.max_position_embeddings,
            sliding_window,
            rope_frequency_factors: None,
            tie_word_embeddings: fields.boolean("tie_word_embeddings")?.unwrap_or(false),
            qkv_bias: architecture == Architecture::Qwen2 || attention_bias,
            o_bias: architecture != Architecture::Qwen2 && attention_bias,
            qk_norm: matches!(architecture, Architecture::Qwen3 | Architecture::Qwen3Moe),
            experts,
            eos_token_ids,
        };
        if config.checked_parameter_bytes(4).is_none() {
            return Err(invalid(
                "the config describes more weight bytes than fit in 64 bits".into(),
            ));
        }
        Ok(config)
    }

    /// The architecture `architectures` names first, with the class name as
    /// written; `model_type`, when given, must agree with it.
    fn architecture<'f>(fields: &'f Fields<'_>) -> Result<(Architecture, &'f str)> {
        let class = match fields.get("architectures") {
            Some(Value::Array(list)) => match list.first() {
                Some(Value::String(class)) => class.as_str(),
                _ => {
                    return Err(
                        fields.invalid("`architectures` must list the model class first, as a string".into())
                    );
                }
            },
            Some(_) => return Err(fields.invalid("`architectures` must be a list of class names".into())),
            None => return Err(fields.invalid("config.json has no `architectures` entry".into())),
        };
        let architecture = match class {
            "LlamaForCausalLM" => Architecture::Llama,
            "Qwen2ForCausalLM" => Architecture::Qwen2,
            "Qwen3ForCausalLM" => Architecture::Qwen3,
            "MistralForCausalLM" => Architecture::Mistral,
            "Qwen3MoeForCausalLM" => Architecture::Qwen3Moe,
            "MixtralForCausalLM" => Architecture::Mixtral,
            other => {
                return Err(ModelError::UnsupportedArchitecture {
                    path: fields.path.to_path_buf(),
                    architecture: shown(other),
                });
            }
        };
        if let Some(model_type) = fields.string("model_type")?
            && model_type != architecture.model_type()
        {
            return Err(fields.invalid(format!(
                "`model_type` is `{}` but `architectures` names {class} (model_type `{}`)",
                shown(model_type),
                architecture.model_type()
            )));
        }
        Ok((architecture, class))
    }

    /// Refuses the fields that change the math in ways not implemented here
    /// (other families' fields, quantization, another activation, MLP
    /// biases, partial rotary embeddings), rather than run without them.
    fn refuse_unimplemented(fields: &Fields<'_>, class: &str) -> Result<()> {
        for field in FOREIGN_MATH_FIELDS {
            if let Some(value) = fields.get(field)
                && value != &Value::Bool(false)
            {
                return Err(fields.invalid(format!(
                    "`{field}` = {} is not part of {class} and changes the math: refusing to run without it",
                    short(value)
                )));
            }
        }
        if fields.get("quantization_config").is_some() {
            return Err(fields.invalid(
                "`quantization_config`: quantized checkpoints are not supported (bf16, f16 and f32 weights are)".into(),
            ));
        }
        if let Some(activation) = fields.string("hidden_act")?
            && !matches!(activation, "silu" | "swish")
        {
            return Err(fields.invalid(format!(
                "`hidden_act` = `{}` is not implemented (the MLP uses silu)",
                shown(activation)
            )));
        }
        if fields.boolean("mlp_bias")? == Some(true) {
            return Err(fields.invalid("`mlp_bias` = true is not implemented".into()));
        }
        if let Some(factor) = fields.number("partial_rotary_factor")?
            && factor != 1.0
        {
            return Err(fields.invalid(format!(
                "`partial_rotary_factor` = {factor}: partial rotary embeddings are not implemented"
            )));
        }
        Ok(())
    }

    /// Every RoPE frequency the settings give must be finite and positive
    /// (a bad theta or scaling would reach the kernels as NaN or infinity).
    fn check_rope_frequencies(
        fields: &Fields<'_>,
        head_dim: usize,
        rope_theta: f32,
        scaling: Option<RopeScaling>,
    ) -> Result<()> {
        let frequencies = inverse_frequencies(head_dim, rope_theta, scaling);
        if let Some(bad) = frequencies
            .iter()
            .find(|frequency| !frequency.is_finite() || **frequency <= 0.0)
        {
            return Err(fields.invalid(format!(
                "the rope settings (theta {rope_theta}, {}) give a RoPE frequency of {bad}",
                kernelscope::ops::rope::describe_scaling(scaling)
            )));
        }
        Ok(())
    }

    /// `attention_bias`, refused where the architecture has no such biases.
    fn attention_bias(fields: &Fields<'_>, architecture: Architecture) -> Result<bool> {
        let attention_bias = fields.boolean("attention_bias")?.unwrap_or(false);
        if matches!(architecture, Architecture::Mistral | Architecture::Mixtral) && attention_bias {
            return Err(fields.invalid(format!(
                "`attention_bias` = true is not part of {} (transformers would ignore the biases): refusing to guess",
                architecture.class_name()
            )));
        }
        Ok(attention_bias)
    }

    /// The window of sliding-window attention when some layer uses it.
    fn sliding_window(
        fields: &Fields<'_>,
        architecture: Architecture,
        num_layers: usize,
        path: &Path,
    ) -> Result<Option<usize>> {
        let invalid = |problem: String| ModelError::ConfigInvalid {
            path: path.to_path_buf(),
            problem,
        };
        let window = fields.dimension("sliding_window")?;
        let in_use = match fields.get("layer_types") {
            Some(Value::Array(kinds)) => {
                if kinds.len() != num_layers {
                    return Err(invalid(format!(
                        "`layer_types` lists {} layers but `num_hidden_layers` is {num_layers}",
                        kinds.len()
                    )));
                }
                let mut sliding = false;
                for kind in kinds {
                    match kind.as_str() {
                        Some("full_attention") => {}
                        Some("sliding_attention") => sliding = true,
                        _ => {
                            return Err(invalid(format!(
                                "`layer_types` entry {} is not implemented (full_attention or sliding_attention)",
                                short(kind)
                            )));
                        }
                    }
                }
                sliding
            }
            Some(other) => {
                return Err(invalid(format!(
                    "`layer_types` must be a list, found {}",
                    short(other)
                )));
            }
            None => match architecture {
                Architecture::Qwen2 | Architecture::Qwen3 | Architecture::Qwen3Moe => {
                    fields.boolean("use_sliding_window")? == Some(true)
                        && fields.whole("max_window_layers")?.unwrap_or(0) < num_layers as u64
                }
                Architecture::Mistral | Architecture::Mixtral => window.is_some(),
                // transformers' Llama has no sliding window.
                Architecture::Llama => false,
            },
        };
        if !in_use {
            return Ok(None);
        }
        match window {
            Some(window) => Ok(Some(window)),
            None => Err(invalid(
                "sliding-window attention is in use but `sliding_window` is missing".into(),
            )),
        }
    }

    /// A token id field: one id, a list of ids, or null; each below the vocabulary.
    fn token_ids(fields: &Fields<'_>, field: &str, vocab_size: usize) -> Result<Vec<u32>> {
        let values: Vec<&Value> = match fields.get(field) {
            None => return Ok(Vec::new()),
            Some(Value::Array(list)) => list.iter().collect(),
            Some(value) => vec![value],
        };
        values
            .into_iter()
            .map(|value| match value.as_u64() {
                Some(id) if id < vocab_size as u64 => Ok(id as u32),
                _ => Err(fields.invalid(format!(
                    "`{field}` holds {}, not a token id below vocab_size ({vocab_size})",
                    short(value)
                ))),
            })
            .collect()
    }

    /// `dtype` (transformers 5) and `torch_dtype` (older) must agree when both are given.
    fn check_dtype_fields(fields: &Fields<'_>) -> Result<()> {
        if let (Some(modern), Some(legacy)) = (fields.string("dtype")?, fields.string("torch_dtype")?)
            && modern != legacy
        {
            return Err(fields.invalid(format!(
                "`dtype` (`{}`) and `torch_dtype` (`{}`) disagree",
                shown(modern),
                shown(legacy)
            )));
        }
        Ok(())
    }
}

/// The model's shape as `config.json` gives it, each number checked before
/// it reaches the math.
struct Dimensions {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_layers: usize,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
    max_position_embeddings: usize,
}

impl Dimensions {
    /// Reads the dimensions in the order the checks have always run
    /// (an error names the first field at fault).
    fn read(fields: &Fields<'_>) -> Result<Dimensions> {
        let vocab_size = fields.required_dimension("vocab_size")?;
        let hidden_size = fields.required_dimension("hidden_size")?;
        let intermediate_size = fields.required_dimension("intermediate_size")?;
        let num_layers = fields.required_dimension("num_hidden_layers")?;
        if num_layers > MAX_LAYERS {
            return Err(fields.invalid(format!(
                "`num_hidden_layers` = {num_layers} is more than this engine accepts ({MAX_LAYERS})"
            )));
        }
        let num_heads = fields.required_dimension("num_attention_heads")?;
        let num_kv_heads = fields.dimension("num_key_value_heads")?.unwrap_or(num_heads);
        if !num_heads.is_multiple_of(num_kv_heads) {
            return Err(fields.invalid(format!(
                "`num_attention_heads` ({num_heads}) must be a multiple of `num_key_value_heads` ({num_kv_heads})"
            )));
        }
        let head_dim = match fields.dimension("head_dim")? {
            Some(head_dim) => head_dim,
            None => hidden_size / num_heads,
        };
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(fields.invalid(format!(
                "head_dim must be even and positive, found {head_dim} (`head_dim`, or hidden_size / num_attention_heads)"
            )));
        }
        for (name, width) in [
            ("num_attention_heads * head_dim", num_heads.checked_mul(head_dim)),
            (
                "num_key_value_heads * head_dim",
                num_kv_heads.checked_mul(head_dim),
            ),
        ] {
            if width.is_none_or(|width| width as u64 > MAX_DIMENSION) {
                return Err(fields.invalid(format!("{name} is larger than {MAX_DIMENSION}")));
            }
        }
        let max_position_embeddings = fields.required_dimension("max_position_embeddings")?;
        Ok(Dimensions {
            vocab_size,
            hidden_size,
            intermediate_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            max_position_embeddings,
        })
    }
}
