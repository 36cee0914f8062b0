//! Writing a model as a GGUF file the way llama.cpp's converter and
//! quantizer would: its metadata keys, the `llama` architecture's Q and K
//! rows interleaved (`convert_hf_to_gguf.py`'s `permute`), Llama 3's RoPE
//! scaling as `rope_freqs.weight`, and each tensor in the type
//! `llama-quantize` picks for the chosen file type (`llama_tensor_get_type`:
//! Q4_K_M keeps some `attn_v` and `ffn_down` in Q6_K, the output matrix
//! in Q6_K, vectors in F32, and falls back where rows are not whole
//! K-blocks). The quantizers are llama.cpp's reference ones
//! (`kernelscope::quant`). `gen-model --out F.gguf` writes a preset's
//! seeded weights with a byte-level vocabulary; `kscope quantize` a
//! safetensors checkpoint.

mod file_type;
mod vocabulary;

use std::path::Path;

use kernelscope::ops::WeightFormat;
use rayon::prelude::*;

use crate::config::{Architecture, Config, TensorRole};
use crate::error::{ModelError, Result};
use crate::gguf::{GgufWriter, TensorType};
use crate::gguf_model::{file_row, gguf_name, permuted_heads};
use crate::tokenizer::GgufVocabulary;

pub use file_type::GgufFileType;
use file_type::tensor_type;
use vocabulary::{synthetic_vocabulary, write_vocabulary};

/// The hyper-parameters under llama.cpp's keys.
fn hyper_parameters(
    writer: &mut GgufWriter,
    config: &Config,
    name: &str,
    file_type: GgufFileType,
) -> Result<()> {
    let arch = match config.architecture {
        Architecture::Qwen2 => "qwen2",
        Architecture::Llama | Architecture::Mistral => "llama",
        Architecture::Qwen3 => "qwen3",
        Architecture::Qwen3Moe => "qwen3moe",
        // llama.cpp reads Mixtral as a `llama` with experts.
        Architecture::Mixtral => "llama",
    };
    let key = |name: &str| format!("{arch}.{name}");
    let count = |value: usize| value as u32;
    writer.add_metadata("general.architecture", arch)?;
    writer.add_metadata("general.name", name)?;
    writer.add_metadata("general.file_type", file_type.id())?;
    writer.add_metadata(&key("vocab_size"), count(config.vocab_size))?;
    writer.add_metadata(&key("context_length"), count(config.max_position_embeddings))?;
    writer.add_metadata(&key("embedding_length"), count(config.hidden_size))?;
    writer.add_metadata(&key("block_count"), count(config.num_layers))?;
    writer.add_metadata(&key("feed_forward_length"), count(config.intermediate_size))?;
    writer.add_metadata(&key("attention.head_count"), count(config.num_heads))?;
    writer.add_metadata(&key("attention.head_count_kv"), count(config.num_kv_heads))?;
    writer.add_metadata(&key("attention.key_length"), count(config.head_dim))?;
    writer.add_metadata(&key("attention.value_length"), count(config.head_dim))?;
    writer.add_metadata(&key("rope.dimension_count"), count(config.head_dim))?;
    writer.add_metadata(&key("attention.layer_norm_rms_epsilon"), config.rms_norm_eps)?;
    writer.add_metadata(&key("rope.freq_base"), config.rope_theta)?;
    if let Some(experts) = &config.experts {
        expert_parameters(writer, config, experts, arch)?;
    }
    match config.rope_scaling {
        None | Some(kernelscope::ops::rope::RopeScaling::Llama3(_)) => {}
        Some(kernelscope::ops::rope::RopeScaling::Linear { factor }) => {
            writer.add_metadata(&key("rope.scaling.type"), "linear")?;
            writer.add_metadata(&key("rope.scaling.factor"), factor)?;
        }
        Some(kernelscope::ops::rope::RopeScaling::Yarn(_)) => {
            return Err(ModelError::InvalidInput(
                "writing YaRN RoPE scaling to GGUF is not implemented".into(),
            ));
        }
    }
    Ok(())
}

/// A sparse model's experts under llama.cpp's keys, or the error naming
/// what llama.cpp's graphs cannot express: weights not renormalised over
/// the chosen experts (its `qwen3moe` and Mixtral graphs always
/// renormalise), or dense layers among the sparse ones.
fn expert_parameters(
    writer: &mut GgufWriter,
    config: &Config,
    experts: &crate::config::Experts,
    arch: &str,
) -> Result<()> {
    let class = config.architecture.class_name();
    if !experts.normalize_weights {
        return Err(ModelError::InvalidInput(format!(
            "{class} with `norm_topk_prob` false cannot be written to GGUF: llama.cpp renormalises the chosen experts' weights"
        )));
    }
    if let Some(dense) = experts.sparse_layers.iter().position(|&sparse| !sparse) {
        return Err(ModelError::InvalidInput(format!(
            "{class} with dense layers among its sparse ones (layer {dense}: `decoder_sparse_step` or `mlp_only_layers`) cannot be written to GGUF: llama.cpp's graph has experts in every layer"
        )));
    }
    let key = |name: &str| format!("{arch}.{name}");
    writer.add_metadata(&key("expert_count"), experts.count as u32)?;
    writer.add_metadata(&key("expert_used_count"), experts.per_token as u32)?;
    if config.architecture == Architecture::Qwen3Moe {
        writer.add_metadata(
            &key("expert_feed_forward_length"),
            experts.intermediate_size as u32,
        )?;
    }
    Ok(())
}

/// Llama 3's frequency divisors (what `rope_freqs.weight` holds): the base
/// frequencies over the scaled ones.
fn rope_factors(config: &Config) -> Option<Vec<f32>> {
    let kernelscope::ops::rope::RopeScaling::Llama3(_) = config.rope_scaling? else {
        return None;
    };
    let base = kernelscope::ops::rope::inverse_frequencies(config.head_dim, config.rope_theta, None);
    let scaled = config.rope_inverse_frequencies();
    Some(
        base.iter()
            .zip(&scaled)
            .map(|(base, scaled)| base / scaled)
            .collect(),
    )
}

/// Writes `config`'s model as a GGUF file of `file_type` at `out`, each
/// tensor's values (row-major, transformers' layout) from `values`, a
/// progress bar on stderr unless `quiet`. `name` goes into `general.name`.
/// With `synthetic_vocabulary`, a byte-level vocabulary is written so a
/// prompt can be encoded.
pub fn write_gguf(
    config: &Config,
    out: &Path,
    file_type: GgufFileType,
    name: &str,
    synthetic_vocabulary_wanted: bool,
    quiet: bool,
    values: impl Fn(&str, &[usize]) -> Result<Vec<f32>>,
) -> Result<()> {
    let vocabulary = synthetic_vocabulary_wanted
        .then(|| synthetic_vocabulary(config))
        .transpose()?;
    write_gguf_with(config, out, file_type, name, vocabulary.as_ref(), quiet, values)
}

/// [`write_gguf`] with a given vocabulary (or none).
fn write_gguf_with(
    config: &Config,
    out: &Path,
    file_type: GgufFileType,
    name: &str,
    vocabulary: Option<&GgufVocabulary>,
    quiet: bool,
    values: impl Fn(&str, &[usize]) -> Result<Vec<f32>>,
) -> Result<()> {
    let mut writer = GgufWriter::new(out);
    hyper_parameters(&mut writer, config, name, file_type)?;
    if let Some(vocabulary) = vocabulary {
        let mut vocabulary = vocabulary.clone();
        // The end token the config names, where the vocabulary does not.
        vocabulary.eos = vocabulary.eos.or(config.eos_token_ids.first().copied());
        let eot = config
            .eos_token_ids
            .get(1)
            .copied()
            .or(vocabulary.eos.map(|eos| eos + 1));
        let eot = eot.filter(|id| (*id as usize) < vocabulary.tokens.len());
        write_vocabulary(&mut writer, &vocabulary, eot)?;
    }
    let factors = rope_factors(config);
    let mut plan = Vec::new();
    if let Some(factors) = &factors {
        writer.add_tensor_info("rope_freqs.weight", &[factors.len() as u64], TensorType::F32)?;
    }
    let mut total = 0u64;
    for spec in config.tensors() {
        let columns = *spec.shape.last().expect("tensors have a shape");
        let tensor_type = tensor_type(file_type, config, spec.role, spec.shape.len(), columns);
        let dims: Vec<u64> = spec.shape.iter().rev().map(|&d| d as u64).collect();
        total += writer.add_tensor_info(&gguf_name(spec.role), &dims, tensor_type)?;
        plan.push((spec, tensor_type));
    }
    let progress = crate::progress::progress_bar(total as usize, quiet, "writing GGUF");
    let mut tensors = writer.write_header()?;
    if let Some(factors) = &factors {
        let bytes: Vec<u8> = factors.iter().flat_map(|factor| factor.to_le_bytes()).collect();
        tensors.write_tensor(&bytes)?;
    }
    for (spec, tensor_type) in plan {
        let values = values(&spec.name, &spec.shape)?;
        if matches!(tensor_type.format(), Some(WeightFormat::Quantized(_))) {
            refuse_non_finite(&spec.name, &values, &spec.shape)?;
        }
        let bytes = encode_tensor(
            &values,
            &spec.shape,
            permuted_heads(config, spec.role),
            tensor_type,
        )?;
        tensors.write_tensor(&bytes)?;
        progress.inc(bytes.len() as u64);
    }
    progress.finish_and_clear();
    tensors.finish()
}

/// Refuses a tensor to be quantized that holds a NaN or an infinity,
/// naming its first one.
fn refuse_non_finite(name: &str, values: &[f32], shape: &[usize]) -> Result<()> {
    let Some(index) = values.iter().position(|value| !value.is_finite()) else {
        return Ok(());
    };
    let columns = shape.last().copied().unwrap_or(1).max(1);
    Err(ModelError::NonFiniteWeight {
        name: name.to_string(),
        index,
        row: index / columns,
        column: index % columns,
        value: values[index],
    })
}

/// A tensor's bytes in `tensor_type`, its rows interleaved for `heads`
/// heads as llama.cpp's converter does for the `llama` architecture.
fn encode_tensor(
    values: &[f32],
    shape: &[usize],
    heads: Option<usize>,
    tensor_type: TensorType,
) -> Result<Vec<u8>> {
    let columns = if shape.len() == 1 {
        values.len()
    } else {
        *shape.last().expect("a shape")
    };
    let rows = values.len() / columns.max(1);
    // The file's row r holds transformers' row `source[r]`.
    let mut source: Vec<usize> = (0..rows).collect();
    if let Some(heads) = heads {
        let head_rows = rows / heads;
        for row in 0..rows {
            source[file_row(row, head_rows)] = row;
        }
    }
    let row_bytes = tensor_type.byte_len(columns as u64).expect("declared") as usize;
    let format = tensor_type
        .format()
        .ok_or_else(|| ModelError::InvalidInput(format!("writing {tensor_type} is not implemented")))?;
    let mut bytes = vec![0u8; rows * row_bytes];
    bytes
        .par_chunks_mut(row_bytes.max(1))
        .enumerate()
        .try_for_each(|(row, out)| {
            let input = &values[source[row] * columns..(source[row] + 1) * columns];
            match format {
                WeightFormat::Dense(dtype) => out.copy_from_slice(&crate::synthetic::encode(input, dtype)?),
                WeightFormat::Quantized(format) => format
                    .quantize_row(input, out)
                    .map_err(|error| ModelError::InvalidInput(error.to_string()))?,
            }
            Ok::<(), ModelError>(())
        })?;
    Ok(bytes)
}

/// Converts the Hugging Face checkpoint in `directory` (config.json and
/// safetensors files) into a GGUF file of `file_type` at `out`, as
/// llama.cpp's converter and quantizer would, its vocabulary from the
/// directory's `tokenizer.json` where that is a byte-level BPE vocabulary
/// with a pre-tokenizer GGUF names. Returns what was left out (a
/// tokenizer it cannot carry), for the caller to say.
pub fn quantize_checkpoint(
    directory: &Path,
    out: &Path,
    file_type: GgufFileType,
    quiet: bool,
) -> Result<Vec<String>> {
    let config = Config::from_directory(directory)?;
    let checkpoint = crate::loader::Checkpoint::open(directory)?;
    let dtype = checkpoint.dtype()?;
    let mut notes = Vec::new();
    let vocabulary = match crate::tokenizer::gguf::vocabulary_of_tokenizer_json(directory)? {
        Ok(vocabulary) => Some(vocabulary),
        Err(reason) => {
            notes.push(format!("no vocabulary written: {reason}"));
            None
        }
    };
    let specs: Vec<crate::config::TensorSpec> = config.tensors().collect();
    let name = directory
        .file_name()
        .map_or_else(|| "model".to_string(), |name| name.to_string_lossy().into_owned());
    write_gguf_with(
        &config,
        out,
        file_type,
        &name,
        vocabulary.as_ref(),
        quiet,
        |tensor, shape| {
            let count: usize = shape.iter().product();
            let mut values = vec![0.0f32; count];
            let spec = specs.iter().find(|spec| spec.name == tensor);
            // Stacked experts are gathered from the checkpoint's own layout
            // (a tensor per expert, or transformers 5's stacked ones), and a
            // router from whichever name the checkpoint gives it.
            if let Some(spec) = spec
                && let TensorRole::Layer { index, tensor } = spec.role
                && tensor.is_stacked_experts()
            {
                let bytes = checkpoint.stacked_experts(&config, index, tensor, dtype)?;
                crate::gguf_model::widen(dtype, &bytes, &mut values);
                return Ok(values);
            }
            let name = spec.map_or_else(
                || tensor.to_string(),
                |spec| checkpoint.resolve_name(&config, spec),
            );
            let location = checkpoint.locate(&name, shape, dtype)?;
            let map = &checkpoint.files[location.file].1;
            let bytes = &map[location.offset..location.offset + count * dtype.size_in_bytes()];
            crate::gguf_model::widen(dtype, bytes, &mut values);
            Ok(values)
        },
    )?;
    Ok(notes)
}
