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

use std::path::Path;

use kernelscope::quant::QuantFormat;
use rayon::prelude::*;

use crate::config::{Architecture, Config, LayerTensor, TensorRole};
use crate::error::{ModelError, Result};
use crate::gguf::{Array, GgufWriter, TensorType, Value};
use crate::gguf_model::{file_row, gguf_name};
use crate::tokenizer::GgufVocabulary;

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
    fn id(self) -> u32 {
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
fn tensor_type(
    file_type: GgufFileType,
    config: &Config,
    role: TensorRole,
    rank: usize,
    columns: usize,
) -> TensorType {
    if rank == 1 || file_type == GgufFileType::F32 {
        return TensorType::F32;
    }
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
                GgufFileType::Q4_K_M | GgufFileType::Q5_K_M,
                TensorRole::Layer {
                    index,
                    tensor: LayerTensor::ValueProjection | LayerTensor::DownProjection,
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

/// The byte-level vocabulary of a synthetic model: the 256 byte symbols,
/// a few merges, Llama 3's three special tokens, then reserved control
/// tokens up to the vocabulary size. Any text encodes (every byte is a
/// token).
fn synthetic_vocabulary(config: &Config) -> Result<GgufVocabulary> {
    const MERGES: [&str; 8] = ["Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "Ġt he", "e r"];
    const SPECIAL: [&str; 3] = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"];
    let needed = 256 + MERGES.len() + SPECIAL.len();
    if config.vocab_size < needed {
        return Err(ModelError::InvalidInput(format!(
            "a vocabulary of {} tokens cannot hold the {needed} of a byte-level vocabulary",
            config.vocab_size
        )));
    }
    let mut tokens: Vec<String> = crate::synthetic::byte_level_alphabet()
        .iter()
        .map(|symbol| symbol.to_string())
        .collect();
    tokens.extend(MERGES.iter().map(|merge| merge.replace(' ', "")));
    let mut types = vec![1i32; tokens.len()];
    tokens.extend(SPECIAL.iter().map(|token| token.to_string()));
    types.extend([3; SPECIAL.len()]);
    let reserved = config.vocab_size - tokens.len();
    tokens.extend((0..reserved).map(|index| format!("<|reserved_special_token_{index}|>")));
    types.extend(std::iter::repeat_n(3, reserved));
    let first_special = (256 + MERGES.len()) as u32;
    let llama = config.architecture != Architecture::Qwen2;
    Ok(GgufVocabulary {
        model: "gpt2".into(),
        pre: Some(if llama { "llama-bpe" } else { "qwen2" }.into()),
        tokens,
        scores: None,
        token_types: Some(types),
        merges: Some(MERGES.iter().map(|merge| merge.to_string()).collect()),
        bos: Some(first_special),
        eos: Some(first_special + 1),
        unknown: None,
        add_bos: Some(llama),
        add_eos: None,
        add_space_prefix: None,
    })
}

/// `tokenizer.ggml.*` of `vocabulary` (and the end-of-turn id `eot`).
fn write_vocabulary(writer: &mut GgufWriter, vocabulary: &GgufVocabulary, eot: Option<u32>) -> Result<()> {
    writer.add_metadata("tokenizer.ggml.model", vocabulary.model.as_str())?;
    if let Some(pre) = &vocabulary.pre {
        writer.add_metadata("tokenizer.ggml.pre", pre.as_str())?;
    }
    writer.add_metadata(
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(vocabulary.tokens.clone())),
    )?;
    if let Some(scores) = &vocabulary.scores {
        writer.add_metadata("tokenizer.ggml.scores", Value::Array(Array::F32(scores.clone())))?;
    }
    if let Some(types) = &vocabulary.token_types {
        writer.add_metadata(
            "tokenizer.ggml.token_type",
            Value::Array(Array::I32(types.clone())),
        )?;
    }
    if let Some(merges) = &vocabulary.merges {
        writer.add_metadata(
            "tokenizer.ggml.merges",
            Value::Array(Array::String(merges.clone())),
        )?;
    }
    for (key, id) in [
        ("tokenizer.ggml.bos_token_id", vocabulary.bos),
        ("tokenizer.ggml.eos_token_id", vocabulary.eos),
        ("tokenizer.ggml.eot_token_id", eot),
        ("tokenizer.ggml.unknown_token_id", vocabulary.unknown),
    ] {
        if let Some(id) = id {
            writer.add_metadata(key, id)?;
        }
    }
    for (key, flag) in [
        ("tokenizer.ggml.add_bos_token", vocabulary.add_bos),
        ("tokenizer.ggml.add_eos_token", vocabulary.add_eos),
    ] {
        if let Some(flag) = flag {
            writer.add_metadata(key, flag)?;
        }
    }
    Ok(())
}

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
    let progress = crate::weights::progress_bar(total as usize, quiet, "writing GGUF");
    let mut tensors = writer.write_header()?;
    if let Some(factors) = &factors {
        let bytes: Vec<u8> = factors.iter().flat_map(|factor| factor.to_le_bytes()).collect();
        tensors.write_tensor(&bytes)?;
    }
    for (spec, tensor_type) in plan {
        let values = values(&spec.name, &spec.shape)?;
        let heads = match (config.architecture, spec.role) {
            (
                Architecture::Llama | Architecture::Mistral,
                TensorRole::Layer {
                    tensor: LayerTensor::QueryProjection | LayerTensor::QueryBias,
                    ..
                },
            ) => Some(config.num_heads),
            (
                Architecture::Llama | Architecture::Mistral,
                TensorRole::Layer {
                    tensor: LayerTensor::KeyProjection | LayerTensor::KeyBias,
                    ..
                },
            ) => Some(config.num_kv_heads),
            _ => None,
        };
        let bytes = encode_tensor(&values, &spec.shape, heads, tensor_type)?;
        tensors.write_tensor(&bytes)?;
        progress.inc(bytes.len() as u64);
    }
    progress.finish_and_clear();
    tensors.finish()
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
    let mut bytes = vec![0u8; rows * row_bytes];
    let format = match tensor_type {
        TensorType::F32 | TensorType::F16 | TensorType::BF16 => None,
        other => Some(
            other
                .format()
                .and_then(|format| match format {
                    crate::gguf::WeightFormat::Quantized(format) => Some(format),
                    crate::gguf::WeightFormat::Dense(_) => None,
                })
                .ok_or_else(|| ModelError::InvalidInput(format!("writing {other} is not implemented")))?,
        ),
    };
    bytes
        .par_chunks_mut(row_bytes.max(1))
        .enumerate()
        .try_for_each(|(row, out)| {
            let input = &values[source[row] * columns..(source[row] + 1) * columns];
            write_row(input, tensor_type, format, out)
        })?;
    Ok(bytes)
}

/// One row in its type.
fn write_row(
    input: &[f32],
    tensor_type: TensorType,
    format: Option<QuantFormat>,
    out: &mut [u8],
) -> Result<()> {
    match (tensor_type, format) {
        (TensorType::F32, _) => input
            .iter()
            .zip(out.chunks_exact_mut(4))
            .for_each(|(v, o)| o.copy_from_slice(&v.to_le_bytes())),
        (TensorType::F16, _) => input
            .iter()
            .zip(out.chunks_exact_mut(2))
            .for_each(|(v, o)| o.copy_from_slice(&half::f16::from_f32(*v).to_le_bytes())),
        (TensorType::BF16, _) => input
            .iter()
            .zip(out.chunks_exact_mut(2))
            .for_each(|(v, o)| o.copy_from_slice(&half::bf16::from_f32(*v).to_le_bytes())),
        (_, Some(format)) => format
            .quantize_row(input, out)
            .map_err(|error| ModelError::InvalidInput(error.to_string()))?,
        (other, None) => {
            return Err(ModelError::InvalidInput(format!(
                "writing {other} is not implemented"
            )));
        }
    }
    Ok(())
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
            let location = checkpoint.locate(tensor, shape, dtype)?;
            let map = &checkpoint.files[location.file].1;
            let count: usize = shape.iter().product();
            let bytes = &map[location.offset..location.offset + count * dtype.size_in_bytes()];
            let mut values = vec![0.0f32; count];
            crate::gguf_model::widen(dtype, bytes, &mut values);
            Ok(values)
        },
    )?;
    Ok(notes)
}
