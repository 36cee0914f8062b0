//! `config.json`: the subset of Hugging Face's Llama/Qwen2/Mistral config the
//! engine needs, validated once so the rest of the code can trust it.

use std::path::Path;

use kernelscope::ops::rope::{Llama3Scaling, RopeScaling, YarnScaling, inverse_frequencies};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{ModelError, Result, one_line, shown};

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
    /// Bias on the output projection (`attention_bias` of Llama).
    pub o_bias: bool,
    /// End-of-sequence token ids.
    pub eos_token_ids: Vec<u32>,
}

/// The most decoder layers a config may declare: far above any released
/// model (126), low enough that listing the layers' tensors is cheap work
/// even for a hostile config.
pub const MAX_LAYERS: usize = 4096;

/// The largest size any single dimension may have: kernels index with u32
/// and products of two dimensions must not overflow u64.
const MAX_DIMENSION: u64 = (1 << 31) - 1;

/// The largest `config.json` read (real ones are a few kilobytes).
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Fields of other model families that change the math. None of them has
/// a meaning in the three architectures run here, so a config that sets one
/// is not what it claims to be, and is refused rather than run without it.
const FOREIGN_MATH_FIELDS: [&str; 16] = [
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
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "no_rope_layers",
    "attention_chunk_size",
    "use_parallel_residual",
];

/// The rope types this engine implements, for error messages.
const ROPE_TYPES: &str = "default, linear, llama3, yarn";

/// Typed reads of one JSON object's fields, with errors that name the
/// field (as `prefix` + name, e.g. `rope_parameters.factor`).
struct Fields<'a> {
    map: &'a Map<String, Value>,
    prefix: &'a str,
    path: &'a Path,
}

impl Fields<'_> {
    fn invalid(&self, problem: String) -> ModelError {
        ModelError::ConfigInvalid {
            path: self.path.to_path_buf(),
            problem,
        }
    }

    fn name(&self, field: &str) -> String {
        format!("{}{field}", self.prefix)
    }

    /// The field's value; `null` counts as absent, as in transformers.
    fn get(&self, field: &str) -> Option<&Value> {
        self.map.get(field).filter(|value| !value.is_null())
    }

    fn whole(&self, field: &str) -> Result<Option<u64>> {
        match self.get(field) {
            None => Ok(None),
            Some(value) => value.as_u64().map(Some).ok_or_else(|| {
                self.invalid(format!(
                    "`{}` must be a whole number >= 0, found {}",
                    self.name(field),
                    short(value)
                ))
            }),
        }
    }

    /// A dimension: a whole number in 1..=2^31-1.
    fn dimension(&self, field: &str) -> Result<Option<usize>> {
        match self.whole(field)? {
            None => Ok(None),
            Some(value) if value == 0 || value > MAX_DIMENSION => Err(self.invalid(format!(
                "`{}` must be in 1..={MAX_DIMENSION}, found {value}",
                self.name(field)
            ))),
            Some(value) => Ok(Some(value as usize)),
        }
    }

    fn required_dimension(&self, field: &str) -> Result<usize> {
        self.dimension(field)?
            .ok_or_else(|| self.invalid(format!("`{}` is missing", self.name(field))))
    }

    fn number(&self, field: &str) -> Result<Option<f64>> {
        match self.get(field) {
            None => Ok(None),
            Some(value) => match value.as_f64() {
                Some(number) if number.is_finite() => Ok(Some(number)),
                _ => Err(self.invalid(format!(
                    "`{}` must be a finite number, found {}",
                    self.name(field),
                    short(value)
                ))),
            },
        }
    }

    /// A number > 0 that stays finite and non-zero in f32.
    fn positive(&self, field: &str) -> Result<Option<f32>> {
        match self.number(field)? {
            None => Ok(None),
            Some(number) => {
                let single = number as f32;
                if number > 0.0 && single.is_finite() && single > 0.0 {
                    Ok(Some(single))
                } else {
                    Err(self.invalid(format!(
                        "`{}` must be a positive number within f32 range, found {number}",
                        self.name(field)
                    )))
                }
            }
        }
    }

    fn required_positive(&self, field: &str) -> Result<f32> {
        self.positive(field)?
            .ok_or_else(|| self.invalid(format!("`{}` is missing", self.name(field))))
    }

    fn boolean(&self, field: &str) -> Result<Option<bool>> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Bool(flag)) => Ok(Some(*flag)),
            Some(value) => Err(self.invalid(format!(
                "`{}` must be true or false, found {}",
                self.name(field),
                short(value)
            ))),
        }
    }

    fn string(&self, field: &str) -> Result<Option<&str>> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(value) => Err(self.invalid(format!(
                "`{}` must be a string, found {}",
                self.name(field),
                short(value)
            ))),
        }
    }
}

/// A JSON value cut to a length that fits in a one-line error.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 40 {
        format!("{}...", text.chars().take(40).collect::<String>())
    } else {
        text
    }
}

/// One spelling of the RoPE settings, before the two layouts are compared.
#[derive(Clone, Debug, PartialEq)]
struct RopeSettings {
    theta: Option<f32>,
    scaling: Option<RopeScaling>,
    attention_scaling: f32,
}

/// YaRN's `get_mscale` in transformers.
fn yarn_mscale(scale: f64, mscale: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * mscale * scale.ln() + 1.0
    }
}

/// Reads the scaling fields of one rope object (`rope_parameters` in the
/// transformers 5 layout, `rope_scaling` in the older one).
fn rope_settings(
    fields: &Fields<'_>,
    theta: Option<f32>,
    max_position_embeddings: usize,
) -> Result<RopeSettings> {
    let modern = fields.string("rope_type")?;
    let legacy = fields.string("type")?;
    let kind = match (modern, legacy) {
        (Some(modern), Some(legacy)) if modern != legacy => {
            return Err(fields.invalid(format!(
                "`{}` (`{}`) and `{}` (`{}`) disagree",
                fields.name("rope_type"),
                shown(modern),
                fields.name("type"),
                shown(legacy)
            )));
        }
        (Some(kind), _) | (None, Some(kind)) => kind,
        (None, None) if fields.prefix == "rope_parameters." => "default",
        (None, None) => {
            return Err(fields.invalid(format!(
                "`{}` has no `rope_type` (or `type`): say which scaling it is ({ROPE_TYPES})",
                fields.prefix.trim_end_matches('.')
            )));
        }
    };
    if let Some(factor) = fields.number("partial_rotary_factor")?
        && factor != 1.0
    {
        return Err(fields.invalid(format!(
            "`{}` = {factor}: partial rotary embeddings are not implemented",
            fields.name("partial_rotary_factor")
        )));
    }
    let mut settings = RopeSettings {
        theta,
        scaling: None,
        attention_scaling: 1.0,
    };
    match kind {
        "default" => {}
        "linear" => {
            settings.scaling = Some(RopeScaling::Linear {
                factor: fields.required_positive("factor")?,
            });
        }
        "llama3" => {
            let low_freq_factor = fields.required_positive("low_freq_factor")?;
            let high_freq_factor = fields.required_positive("high_freq_factor")?;
            if high_freq_factor <= low_freq_factor {
                return Err(fields.invalid(format!(
                    "`{}` ({high_freq_factor}) must be greater than `{}` ({low_freq_factor})",
                    fields.name("high_freq_factor"),
                    fields.name("low_freq_factor")
                )));
            }
            let original = fields
                .dimension("original_max_position_embeddings")?
                .ok_or_else(|| {
                    fields.invalid(format!(
                        "`{}` is missing",
                        fields.name("original_max_position_embeddings")
                    ))
                })?;
            settings.scaling = Some(RopeScaling::Llama3(Llama3Scaling {
                factor: fields.required_positive("factor")?,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: original as f32,
            }));
        }
        "yarn" => {
            let factor = fields.required_positive("factor")?;
            let original = fields
                .dimension("original_max_position_embeddings")?
                .unwrap_or(max_position_embeddings);
            let beta_fast = fields.positive("beta_fast")?.unwrap_or(32.0);
            let beta_slow = fields.positive("beta_slow")?.unwrap_or(1.0);
            if beta_fast <= beta_slow {
                return Err(fields.invalid(format!(
                    "`{}` ({beta_fast}) must be greater than `{}` ({beta_slow})",
                    fields.name("beta_fast"),
                    fields.name("beta_slow")
                )));
            }
            let scale = f64::from(factor);
            settings.attention_scaling = match fields.positive("attention_factor")? {
                Some(attention_factor) => attention_factor,
                None => match (fields.positive("mscale")?, fields.positive("mscale_all_dim")?) {
                    (Some(mscale), Some(all_dim)) => {
                        (yarn_mscale(scale, f64::from(mscale)) / yarn_mscale(scale, f64::from(all_dim)))
                            as f32
                    }
                    _ => yarn_mscale(scale, 1.0) as f32,
                },
            };
            settings.scaling = Some(RopeScaling::Yarn(YarnScaling {
                factor,
                original_max_position_embeddings: original as f32,
                beta_fast,
                beta_slow,
                truncate: fields.boolean("truncate")?.unwrap_or(true),
            }));
        }
        "dynamic" | "longrope" | "ntk" => {
            return Err(fields.invalid(format!(
                "rope type `{kind}` (`{}`) is not implemented (implemented: {ROPE_TYPES})",
                fields.name(if modern.is_some() { "rope_type" } else { "type" })
            )));
        }
        other => {
            return Err(fields.invalid(format!(
                "unknown rope type `{}` in `{}` (implemented: {ROPE_TYPES})",
                shown(other),
                fields.name(if modern.is_some() { "rope_type" } else { "type" })
            )));
        }
    }
    Ok(settings)
}

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
        let map = value
            .as_object()
            .ok_or_else(|| invalid("config.json must hold a JSON object".into()))?;
        let fields = Fields {
            map,
            prefix: "",
            path,
        };
        let class = match fields.get("architectures") {
            Some(Value::Array(list)) => match list.first() {
                Some(Value::String(class)) => class.as_str(),
                _ => {
                    return Err(invalid(
                        "`architectures` must list the model class first, as a string".into(),
                    ));
                }
            },
            Some(_) => return Err(invalid("`architectures` must be a list of class names".into())),
            None => return Err(invalid("config.json has no `architectures` entry".into())),
        };
        let architecture = match class {
            "LlamaForCausalLM" => Architecture::Llama,
            "Qwen2ForCausalLM" => Architecture::Qwen2,
            "MistralForCausalLM" => Architecture::Mistral,
            other => {
                return Err(ModelError::UnsupportedArchitecture {
                    path: path.to_path_buf(),
                    architecture: shown(other),
                });
            }
        };
        if let Some(model_type) = fields.string("model_type")?
            && model_type != architecture.model_type()
        {
            return Err(invalid(format!(
                "`model_type` is `{}` but `architectures` names {class} (model_type `{}`)",
                shown(model_type),
                architecture.model_type()
            )));
        }
        for field in FOREIGN_MATH_FIELDS {
            if let Some(value) = fields.get(field)
                && value != &Value::Bool(false)
            {
                return Err(invalid(format!(
                    "`{field}` = {} is not part of {class} and changes the math: refusing to run without it",
                    short(value)
                )));
            }
        }
        if fields.get("quantization_config").is_some() {
            return Err(invalid(
                "`quantization_config`: quantized checkpoints are not supported (bf16, f16 and f32 weights are)".into(),
            ));
        }
        if let Some(activation) = fields.string("hidden_act")?
            && !matches!(activation, "silu" | "swish")
        {
            return Err(invalid(format!(
                "`hidden_act` = `{}` is not implemented (the MLP uses silu)",
                shown(activation)
            )));
        }
        if fields.boolean("mlp_bias")? == Some(true) {
            return Err(invalid("`mlp_bias` = true is not implemented".into()));
        }
        if let Some(factor) = fields.number("partial_rotary_factor")?
            && factor != 1.0
        {
            return Err(invalid(format!(
                "`partial_rotary_factor` = {factor}: partial rotary embeddings are not implemented"
            )));
        }

        let vocab_size = fields.required_dimension("vocab_size")?;
        let hidden_size = fields.required_dimension("hidden_size")?;
        let intermediate_size = fields.required_dimension("intermediate_size")?;
        let num_layers = fields.required_dimension("num_hidden_layers")?;
        if num_layers > MAX_LAYERS {
            return Err(invalid(format!(
                "`num_hidden_layers` = {num_layers} is more than this engine accepts ({MAX_LAYERS})"
            )));
        }
        let num_heads = fields.required_dimension("num_attention_heads")?;
        let num_kv_heads = fields.dimension("num_key_value_heads")?.unwrap_or(num_heads);
        if !num_heads.is_multiple_of(num_kv_heads) {
            return Err(invalid(format!(
                "`num_attention_heads` ({num_heads}) must be a multiple of `num_key_value_heads` ({num_kv_heads})"
            )));
        }
        let head_dim = match fields.dimension("head_dim")? {
            Some(head_dim) => head_dim,
            None => hidden_size / num_heads,
        };
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(invalid(format!(
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
                return Err(invalid(format!("{name} is larger than {MAX_DIMENSION}")));
            }
        }
        let max_position_embeddings = fields.required_dimension("max_position_embeddings")?;
        let rms_norm_eps = fields.positive("rms_norm_eps")?.unwrap_or(1e-6);

        let rope = Self::rope(&fields, max_position_embeddings, path)?;
        let rope_theta = rope.theta.unwrap_or(10_000.0);
        let frequencies = inverse_frequencies(head_dim, rope_theta, rope.scaling);
        if let Some(bad) = frequencies
            .iter()
            .find(|frequency| !frequency.is_finite() || **frequency <= 0.0)
        {
            return Err(invalid(format!(
                "the rope settings (theta {rope_theta}, {:?}) give a RoPE frequency of {bad}",
                rope.scaling
            )));
        }

        let sliding_window = Self::sliding_window(&fields, architecture, num_layers, path)?;
        let attention_bias = fields.boolean("attention_bias")?.unwrap_or(false);
        if architecture == Architecture::Mistral && attention_bias {
            return Err(invalid(
                "`attention_bias` = true is not part of MistralForCausalLM (transformers would ignore the biases): refusing to guess".into(),
            ));
        }
        let eos_token_ids = Self::token_ids(&fields, "eos_token_id", vocab_size)?;
        Self::check_dtype_fields(&fields)?;

        let config = Config {
            architecture,
            vocab_size,
            hidden_size,
            intermediate_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps,
            rope_theta,
            rope_scaling: rope.scaling,
            rope_attention_scaling: rope.attention_scaling,
            max_position_embeddings,
            sliding_window,
            tie_word_embeddings: fields.boolean("tie_word_embeddings")?.unwrap_or(false),
            qkv_bias: architecture == Architecture::Qwen2 || attention_bias,
            o_bias: architecture != Architecture::Qwen2 && attention_bias,
            eos_token_ids,
        };
        if config.checked_parameter_bytes(4).is_none() {
            return Err(invalid(
                "the config describes more weight bytes than fit in 64 bits".into(),
            ));
        }
        Ok(config)
    }

    /// RoPE from either layout; refused when the layouts disagree.
    fn rope(fields: &Fields<'_>, max_position_embeddings: usize, path: &Path) -> Result<RopeSettings> {
        let invalid = |problem: String| ModelError::ConfigInvalid {
            path: path.to_path_buf(),
            problem,
        };
        let legacy_theta = fields.positive("rope_theta")?;
        let legacy = match fields.get("rope_scaling") {
            None => None,
            Some(Value::Object(map)) => Some(rope_settings(
                &Fields {
                    map,
                    prefix: "rope_scaling.",
                    path,
                },
                legacy_theta,
                max_position_embeddings,
            )?),
            Some(other) => {
                return Err(invalid(format!(
                    "`rope_scaling` must be an object or null, found {}",
                    short(other)
                )));
            }
        };
        let legacy = legacy.unwrap_or(RopeSettings {
            theta: legacy_theta,
            scaling: None,
            attention_scaling: 1.0,
        });
        let modern = match fields.get("rope_parameters") {
            None => None,
            Some(Value::Object(map)) => {
                // Hybrid models key rope_parameters by layer type; the
                // architectures run here have one kind of layer.
                let map = if !map.contains_key("rope_type") && !map.contains_key("rope_theta") {
                    match map.get("full_attention") {
                        Some(Value::Object(inner)) if map.len() == 1 => inner,
                        _ => {
                            return Err(invalid(
                                "`rope_parameters` has neither `rope_type` nor `rope_theta` (per-layer-type rope parameters are not supported)".into(),
                            ));
                        }
                    }
                } else {
                    map
                };
                let inner = Fields {
                    map,
                    prefix: "rope_parameters.",
                    path,
                };
                let theta = inner.positive("rope_theta")?;
                Some(rope_settings(&inner, theta, max_position_embeddings)?)
            }
            Some(other) => {
                return Err(invalid(format!(
                    "`rope_parameters` must be an object, found {}",
                    short(other)
                )));
            }
        };
        let Some(mut modern) = modern else {
            return Ok(legacy);
        };
        // Both layouts in one file: the old fields may restate the new ones,
        // never contradict them.
        if let Some(theta) = legacy.theta {
            match modern.theta {
                Some(modern_theta) if modern_theta != theta => {
                    return Err(invalid(format!(
                        "`rope_theta` ({theta}) and `rope_parameters.rope_theta` ({modern_theta}) disagree"
                    )));
                }
                Some(_) => {}
                None => modern.theta = Some(theta),
            }
        }
        if fields.get("rope_scaling").is_some()
            && (legacy.scaling, legacy.attention_scaling) != (modern.scaling, modern.attention_scaling)
        {
            return Err(invalid(format!(
                "`rope_scaling` ({:?}) and `rope_parameters` ({:?}) disagree",
                legacy.scaling, modern.scaling
            )));
        }
        Ok(modern)
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
                Architecture::Qwen2 => {
                    fields.boolean("use_sliding_window")? == Some(true)
                        && fields.whole("max_window_layers")?.unwrap_or(0) < num_layers as u64
                }
                Architecture::Mistral => window.is_some(),
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

    /// Tensors the checkpoint must hold (without listing their names).
    pub fn tensor_count(&self) -> usize {
        let per_layer = 9 + if self.qkv_bias { 3 } else { 0 } + usize::from(self.o_bias);
        let head = usize::from(!self.tie_word_embeddings);
        2 + head + self.num_layers * per_layer
    }

    /// Bytes of all weights at `bytes_per_element`, in checked arithmetic
    /// (`None` on overflow), without listing the tensors.
    pub fn checked_parameter_bytes(&self, bytes_per_element: u64) -> Option<u64> {
        let [vocab, hidden, inter, layers, q, kv] = [
            self.vocab_size,
            self.hidden_size,
            self.intermediate_size,
            self.num_layers,
            self.num_heads.checked_mul(self.head_dim)?,
            self.num_kv_heads.checked_mul(self.head_dim)?,
        ]
        .map(|value| value as u64);
        let attention = q
            .checked_mul(hidden)?
            .checked_mul(2)?
            .checked_add(kv.checked_mul(hidden)?.checked_mul(2)?)?;
        let biases = if self.qkv_bias { q + 2 * kv } else { 0 } + if self.o_bias { hidden } else { 0 };
        let mlp = inter.checked_mul(hidden)?.checked_mul(3)?;
        let per_layer = attention
            .checked_add(mlp)?
            .checked_add(biases)?
            .checked_add(2 * hidden)?;
        let embedding = vocab.checked_mul(hidden)?;
        let head = if self.tie_word_embeddings { 0 } else { embedding };
        let total = per_layer
            .checked_mul(layers)?
            .checked_add(embedding)?
            .checked_add(head)?
            .checked_add(hidden)?;
        total.checked_mul(bytes_per_element)
    }

    /// Parameters in the checkpoint (validated configs cannot overflow here).
    pub fn parameter_count(&self) -> usize {
        self.checked_parameter_bytes(1)
            .expect("checked when the config was validated") as usize
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
