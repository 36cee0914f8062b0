//! Reading a GGUF file's configuration and vocabulary from its metadata:
//! every hyper-parameter from its key under `general.architecture`, what
//! the engine does not implement refused by name, Llama 3's RoPE factors
//! from `rope_freqs.weight`.

use half::{bf16, f16};
use kernelscope::DType;
use kernelscope::ops::WeightFormat;

use crate::config::{Architecture, Config, Experts, MAX_EXPERTS, MAX_LAYERS};
use crate::error::{ModelError, Result};
use crate::gguf::{GgufFile, TensorInfo};
use crate::tokenizer::GgufVocabulary;

/// The largest dimension read from a file: kernels index with u32.
const MAX_DIMENSION: u64 = (1 << 31) - 1;

/// What a `(Architecture, metadata prefix)` reads.
fn architecture(file: &GgufFile) -> Result<(Architecture, String)> {
    let name = file.metadata().get_str("general.architecture")?;
    let architecture = match name {
        // Mixtral is a `llama` file with experts (as llama.cpp converts it).
        "llama" if file.metadata().contains_key("llama.expert_count") => Architecture::Mixtral,
        "llama" => Architecture::Llama,
        "qwen2" => Architecture::Qwen2,
        "qwen3" => Architecture::Qwen3,
        "qwen3moe" => Architecture::Qwen3Moe,
        other => {
            return Err(ModelError::Gguf {
                path: file.path().to_path_buf(),
                problem: format!(
                    "architecture `{other}` (general.architecture) is not supported (supported: llama, with or without experts, qwen2, qwen3, qwen3moe)"
                ),
            });
        }
    };
    Ok((architecture, name.to_string()))
}

/// Reads the configuration from the metadata: every value the engine uses
/// from its key, refusing what it does not implement by name.
pub(super) fn read_config(file: &GgufFile) -> Result<Config> {
    let metadata = file.metadata();
    let path = file.path().to_path_buf();
    let invalid = |problem: String| ModelError::Gguf {
        path: path.clone(),
        problem,
    };
    let (architecture, prefix) = architecture(file)?;
    let key = |name: &str| format!("{prefix}.{name}");
    let dimension = |name: &str, value: u64| -> Result<usize> {
        if value == 0 || value > MAX_DIMENSION {
            return Err(invalid(format!(
                "`{}` is {value}, expected 1..={MAX_DIMENSION}",
                key(name)
            )));
        }
        Ok(value as usize)
    };
    let required = |name: &str| -> Result<usize> { dimension(name, metadata.get_u64(&key(name))?) };
    let optional = |name: &str| -> Result<Option<usize>> {
        metadata
            .get_u64_opt(&key(name))?
            .map(|value| dimension(name, value))
            .transpose()
    };
    let hidden_size = required("embedding_length")?;
    let num_layers = required("block_count")?;
    if num_layers > MAX_LAYERS {
        return Err(invalid(format!(
            "`{}` is {num_layers}, more than {MAX_LAYERS}",
            key("block_count")
        )));
    }
    let intermediate_size = required("feed_forward_length")?;
    let num_heads = required("attention.head_count")?;
    let num_kv_heads = optional("attention.head_count_kv")?.unwrap_or(num_heads);
    if !num_heads.is_multiple_of(num_kv_heads) {
        return Err(invalid(format!(
            "{num_heads} query heads do not group over {num_kv_heads} key/value heads (`{}`)",
            key("attention.head_count_kv")
        )));
    }
    let head_dim = match optional("attention.key_length")? {
        Some(length) => length,
        None if hidden_size.is_multiple_of(num_heads) => hidden_size / num_heads,
        None => {
            return Err(invalid(format!(
                "hidden size {hidden_size} is not a multiple of {num_heads} heads and `{}` is missing",
                key("attention.key_length")
            )));
        }
    };
    if let Some(value_length) = optional("attention.value_length")?
        && value_length != head_dim
    {
        return Err(invalid(format!(
            "`{}` = {value_length} differs from the key length {head_dim}: not implemented",
            key("attention.value_length")
        )));
    }
    if !head_dim.is_multiple_of(2) {
        return Err(invalid(format!(
            "head dimension {head_dim} is odd: RoPE rotates pairs"
        )));
    }
    if let Some(rotary) = optional("rope.dimension_count")?
        && rotary != head_dim
    {
        return Err(invalid(format!(
            "`{}` = {rotary} of a {head_dim}-element head: partial rotary embeddings are not implemented",
            key("rope.dimension_count")
        )));
    }
    let rms_norm_eps = metadata.get_f32(&key("attention.layer_norm_rms_epsilon"))?;
    if !(rms_norm_eps.is_finite() && rms_norm_eps > 0.0) {
        return Err(invalid(format!(
            "`{}` is {rms_norm_eps}, expected a positive number",
            key("attention.layer_norm_rms_epsilon")
        )));
    }
    let rope_theta = metadata.get_f32_opt(&key("rope.freq_base"))?.unwrap_or(10_000.0);
    if !(rope_theta.is_finite() && rope_theta > 1.0) {
        return Err(invalid(format!(
            "`{}` is {rope_theta}, expected a number above 1",
            key("rope.freq_base")
        )));
    }
    let rope_scaling = match metadata.get_str_opt(&key("rope.scaling.type"))? {
        None | Some("none") => None,
        Some("linear") => {
            let factor = metadata.get_f32(&key("rope.scaling.factor"))?;
            if !(factor.is_finite() && factor > 0.0) {
                return Err(invalid(format!("`{}` is {factor}", key("rope.scaling.factor"))));
            }
            Some(kernelscope::ops::rope::RopeScaling::Linear { factor })
        }
        Some(other) => {
            return Err(invalid(format!(
                "RoPE scaling `{other}` (`{}`) is not implemented for GGUF files (implemented: none, linear, Llama 3's rope_freqs.weight)",
                key("rope.scaling.type")
            )));
        }
    };
    for unimplemented in [
        "attention.sliding_window",
        "attention.q_lora_rank",
        "expert_shared_count",
        "expert_shared_feed_forward_length",
        "expert_group_count",
    ] {
        if metadata.contains_key(&key(unimplemented)) {
            return Err(invalid(format!(
                "`{}` is set: not implemented",
                key(unimplemented)
            )));
        }
    }
    let max_position_embeddings = required("context_length")?;
    let embedding = tensor(file, "token_embd.weight")?;
    let vocab_size = match optional("vocab_size")? {
        Some(size) => size,
        None => match embedding.dims() {
            [_, rows] => dimension("vocab_size", *rows)?,
            _ => return Err(invalid("tensor `token_embd.weight` is not a matrix".into())),
        },
    };
    let rope_frequency_factors = match file.tensor("rope_freqs.weight") {
        None => None,
        Some(factors) => {
            if factors.element_count() != (head_dim / 2) as u64 {
                return Err(invalid(format!(
                    "tensor `rope_freqs.weight` has {} elements, expected {} (half the head)",
                    factors.element_count(),
                    head_dim / 2
                )));
            }
            let values = dense_values(file, factors)?;
            if let Some(bad) = values.iter().find(|value| !(value.is_finite() && **value > 0.0)) {
                return Err(invalid(format!(
                    "tensor `rope_freqs.weight` holds {bad}, expected positive factors"
                )));
            }
            Some(values)
        }
    };
    let mut eos_token_ids = Vec::new();
    for name in [
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id",
    ] {
        if let Some(id) = metadata.get_u32_opt(name)? {
            if id as usize >= vocab_size {
                return Err(invalid(format!(
                    "`{name}` is {id}, not below the vocabulary size {vocab_size}"
                )));
            }
            if !eos_token_ids.contains(&id) {
                eos_token_ids.push(id);
            }
        }
    }
    let experts = read_experts(file, architecture, &prefix, num_layers, intermediate_size)?;
    let qkv_bias = file.tensor("blk.0.attn_q.bias").is_some();
    let o_bias = file.tensor("blk.0.attn_output.bias").is_some();
    if architecture == Architecture::Qwen2 && !qkv_bias {
        return Err(invalid("a qwen2 model without `blk.0.attn_q.bias`".into()));
    }
    let config = Config {
        // Qwen3's per-head norms (`attn_q_norm`, `attn_k_norm`), which the
        // tensor list then asks of every layer.
        qk_norm: matches!(architecture, Architecture::Qwen3 | Architecture::Qwen3Moe),
        experts,
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
        rope_scaling,
        rope_attention_scaling: 1.0,
        max_position_embeddings,
        sliding_window: None,
        rope_frequency_factors,
        tie_word_embeddings: file.tensor("output.weight").is_none(),
        qkv_bias,
        o_bias,
        eos_token_ids,
    };
    if config.checked_parameter_bytes(4).is_none() {
        return Err(invalid(
            "the metadata describes more weight bytes than fit in 64 bits".into(),
        ));
    }
    Ok(config)
}

/// A sparse architecture's experts from `{prefix}.expert_*` (`None` for a
/// dense one): the count, the k each token uses, each expert's rows
/// (`expert_feed_forward_length`, else the file's `feed_forward_length`, as
/// llama.cpp reads Mixtral's), and which layers route (those with a
/// router, `ffn_gate_inp`). The chosen weights are renormalised, as
/// llama.cpp's graphs of both architectures do; a file that says otherwise
/// (`expert_weights_norm` false, a scale other than 1, a gating other than
/// softmax) is refused by name.
fn read_experts(
    file: &GgufFile,
    architecture: Architecture,
    prefix: &str,
    num_layers: usize,
    intermediate_size: usize,
) -> Result<Option<Experts>> {
    if !architecture.has_experts() {
        return Ok(None);
    }
    let metadata = file.metadata();
    let path = file.path().to_path_buf();
    let invalid = |problem: String| ModelError::Gguf {
        path: path.clone(),
        problem,
    };
    let key = |name: &str| format!("{prefix}.{name}");
    let count = metadata.get_u64(&key("expert_count"))? as usize;
    let per_token = metadata.get_u64(&key("expert_used_count"))? as usize;
    let most_chosen = kernelscope::ops::moe::route::MOST_CHOSEN;
    if count == 0 || count > MAX_EXPERTS || per_token == 0 || per_token > count || per_token > most_chosen {
        return Err(invalid(format!(
            "`{}` = {per_token} of `{}` = {count} experts: expected 1..={most_chosen} of 1..={MAX_EXPERTS}",
            key("expert_used_count"),
            key("expert_count")
        )));
    }
    let rows = match metadata.get_u64_opt(&key("expert_feed_forward_length"))? {
        Some(rows) if rows == 0 || rows > MAX_DIMENSION => {
            return Err(invalid(format!(
                "`{}` is {rows}, expected 1..={MAX_DIMENSION}",
                key("expert_feed_forward_length")
            )));
        }
        Some(rows) => rows as usize,
        None => intermediate_size,
    };
    if metadata.get_bool_opt(&key("expert_weights_norm"))? == Some(false) {
        return Err(invalid(format!(
            "`{}` is false: experts' weights without renormalisation are not implemented for GGUF files",
            key("expert_weights_norm")
        )));
    }
    if let Some(scale) = metadata.get_f32_opt(&key("expert_weights_scale"))?
        && scale != 1.0
    {
        return Err(invalid(format!(
            "`{}` is {scale}: scaled expert weights are not implemented",
            key("expert_weights_scale")
        )));
    }
    if let Some(gating) = metadata.get_u32_opt(&key("expert_gating_func"))?
        && gating != 1
    {
        return Err(invalid(format!(
            "`{}` is {gating}: only softmax gating (1) is implemented",
            key("expert_gating_func")
        )));
    }
    let sparse_layers: Vec<bool> = (0..num_layers)
        .map(|layer| file.tensor(&format!("blk.{layer}.ffn_gate_inp.weight")).is_some())
        .collect();
    if !sparse_layers.iter().any(|&sparse| sparse) {
        return Err(invalid(format!(
            "`{}` is {count} but no layer has a router (`blk.N.ffn_gate_inp.weight`)",
            key("expert_count")
        )));
    }
    if (count as u64) * (rows as u64) > MAX_DIMENSION {
        return Err(invalid(format!(
            "{count} experts of {rows} rows are more rows than one tensor may hold"
        )));
    }
    Ok(Some(Experts {
        count,
        per_token,
        intermediate_size: rows,
        normalize_weights: true,
        sparse_layers,
    }))
}

/// The tensor `name`, or the error naming it.
pub(super) fn tensor<'f>(file: &'f GgufFile, name: &str) -> Result<&'f TensorInfo> {
    file.tensor(name).ok_or_else(|| ModelError::Gguf {
        path: file.path().to_path_buf(),
        problem: format!("tensor `{name}` is missing"),
    })
}

/// The values of a dense (F32, F16, BF16) or quantized tensor as f32.
pub(super) fn dense_values(file: &GgufFile, tensor: &TensorInfo) -> Result<Vec<f32>> {
    let bytes = file.tensor_bytes(tensor);
    let count = tensor.element_count() as usize;
    let mut values = vec![0.0f32; count];
    match file.tensor_format(tensor)? {
        WeightFormat::Dense(dtype) => widen(dtype, bytes, &mut values),
        WeightFormat::Quantized(format) => {
            let row = tensor.dims().first().copied().unwrap_or(1) as usize;
            let row_bytes = format.row_bytes(row).unwrap_or(0).max(1);
            for (blocks, out) in bytes.chunks(row_bytes).zip(values.chunks_mut(row.max(1))) {
                format
                    .dequantize_row(blocks, out)
                    .map_err(|error| ModelError::Gguf {
                        path: file.path().to_path_buf(),
                        problem: format!("tensor `{}`: {error}", tensor.name()),
                    })?;
            }
        }
    }
    Ok(values)
}

/// Widens little-endian `bytes` of `dtype` into `out`.
pub(crate) fn widen(dtype: DType, bytes: &[u8], out: &mut [f32]) {
    match dtype {
        DType::F32 => out
            .iter_mut()
            .zip(bytes.chunks_exact(4))
            .for_each(|(o, b)| *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DType::F16 => out
            .iter_mut()
            .zip(bytes.chunks_exact(2))
            .for_each(|(o, b)| *o = f16::from_le_bytes([b[0], b[1]]).to_f32()),
        DType::BF16 => out
            .iter_mut()
            .zip(bytes.chunks_exact(2))
            .for_each(|(o, b)| *o = bf16::from_le_bytes([b[0], b[1]]).to_f32()),
        other => unreachable!("{other} is not a dense weight dtype"),
    }
}

/// `tokenizer.ggml.*`, when the file has a vocabulary.
pub(super) fn read_vocabulary(file: &GgufFile) -> Result<Option<GgufVocabulary>> {
    let metadata = file.metadata();
    let Some(model) = metadata.get_str_opt("tokenizer.ggml.model")? else {
        return Ok(None);
    };
    Ok(Some(GgufVocabulary {
        model: model.to_string(),
        pre: metadata.get_str_opt("tokenizer.ggml.pre")?.map(str::to_string),
        tokens: metadata.get_string_array("tokenizer.ggml.tokens")?.to_vec(),
        scores: metadata.get_f32_array_opt("tokenizer.ggml.scores")?,
        token_types: metadata.get_i32_array_opt("tokenizer.ggml.token_type")?,
        merges: metadata
            .get_string_array_opt("tokenizer.ggml.merges")?
            .map(<[String]>::to_vec),
        bos: metadata.get_u32_opt("tokenizer.ggml.bos_token_id")?,
        eos: metadata.get_u32_opt("tokenizer.ggml.eos_token_id")?,
        unknown: metadata.get_u32_opt("tokenizer.ggml.unknown_token_id")?,
        add_bos: metadata.get_bool_opt("tokenizer.ggml.add_bos_token")?,
        add_eos: metadata.get_bool_opt("tokenizer.ggml.add_eos_token")?,
        add_space_prefix: metadata.get_bool_opt("tokenizer.ggml.add_space_prefix")?,
    }))
}
