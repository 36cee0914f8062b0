//! A GGUF file as the engine runs it: the [`Config`] its metadata
//! describes (`general.architecture` `llama` or `qwen2`, every
//! hyper-parameter read from its key), its vocabulary, and its tensors
//! placed as [`Weights`]. llama.cpp's converter permutes the rows of
//! `attn_q` and `attn_k` of the `llama` architecture for its interleaved
//! RoPE; the engine's RoPE rotates halves, as transformers does, so those
//! rows are put back on load. Quantized matrices stay in their blocks where
//! the device has the quantized kernels (the CPU); elsewhere they are
//! dequantized to bf16 at load, and the model's name says so.

use std::path::Path;

use half::{bf16, f16};
use kernelscope::ops::WeightFormat;
use kernelscope::ops::quantized_linear::QuantizedLinear;
use kernelscope::quant::QuantFormat;
use kernelscope::{Buffer, DType, Device};
use rayon::prelude::*;

use crate::config::shard::{Partition, Split};
use crate::config::{Architecture, Config, LayerTensor, MAX_LAYERS, TensorRole};
use crate::error::{ModelError, Result};
use crate::gguf::{GgufFile, TensorInfo};
use crate::loader::LoadOptions;
use crate::tokenizer::{GgufVocabulary, Tokenizer};
use crate::weights::{Weights, check_fits, progress_bar};

/// The largest dimension read from a file: kernels index with u32.
const MAX_DIMENSION: u64 = (1 << 31) - 1;

/// A GGUF model, opened and checked, before its weights are placed.
pub struct GgufModel {
    /// The file (every part of a split one).
    pub file: GgufFile,
    /// The configuration its metadata describes.
    pub config: Config,
    /// Its vocabulary, when it has one.
    pub vocabulary: Option<GgufVocabulary>,
    /// `tokenizer.chat_template`, when present.
    pub chat_template: Option<String>,
}

impl GgufModel {
    /// Opens `path` and reads the configuration from its metadata.
    pub fn open(path: &Path) -> Result<GgufModel> {
        let file = GgufFile::open(path)?;
        let config = read_config(&file)?;
        let vocabulary = read_vocabulary(&file)?;
        let chat_template = file
            .metadata()
            .get_str_opt("tokenizer.chat_template")?
            .map(str::to_string);
        Ok(GgufModel {
            file,
            config,
            vocabulary,
            chat_template,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The tokenizer of the file's vocabulary, if it has one.
    pub fn tokenizer(&self) -> Result<Option<Tokenizer>> {
        self.vocabulary
            .as_ref()
            .map(|vocabulary| Tokenizer::from_gguf(vocabulary, &self.path().display().to_string()))
            .transpose()
    }

    /// The tensors' formats, most common first, as llama.cpp users name a
    /// file's mix: `Q4_K_M: 193 Q4_K, 33 Q6_K, 65 F32` (the prefix is the
    /// file type `general.file_type` names, where it names one).
    pub fn format_mix(&self) -> String {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for tensor in self.file.tensors() {
            let name = tensor.tensor_type().name().to_string();
            match counts.iter_mut().find(|(known, _)| *known == name) {
                Some((_, count)) => *count += 1,
                None => counts.push((name, 1)),
            }
        }
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let list = counts
            .iter()
            .map(|(name, count)| format!("{count} {name}"))
            .collect::<Vec<_>>()
            .join(", ");
        match self.file_type() {
            Some(file_type) => format!("{file_type}: {list}"),
            None => list,
        }
    }

    /// The file's type as llama.cpp names it (`Q4_K_M`), or `GGUF` where
    /// `general.file_type` names none.
    pub fn file_type_name(&self) -> String {
        self.file_type().unwrap_or("GGUF").to_string()
    }

    /// The name of `general.file_type` (llama.cpp's `LLAMA_FTYPE_*`).
    fn file_type(&self) -> Option<&'static str> {
        let id = self.file.metadata().get_u32_opt("general.file_type").ok()??;
        Some(match id {
            0 => "F32",
            1 => "F16",
            2 => "Q4_0",
            3 => "Q4_1",
            7 => "Q8_0",
            8 => "Q5_0",
            9 => "Q5_1",
            10 => "Q2_K",
            11 => "Q3_K_S",
            12 => "Q3_K_M",
            13 => "Q3_K_L",
            14 => "Q4_K_S",
            15 => "Q4_K_M",
            16 => "Q5_K_S",
            17 => "Q5_K_M",
            18 => "Q6_K",
            32 => "BF16",
            _ => return None,
        })
    }
}

/// What a `(Architecture, metadata prefix)` reads.
fn architecture(file: &GgufFile) -> Result<(Architecture, String)> {
    let name = file.metadata().get_str("general.architecture")?;
    let architecture = match name {
        "llama" => Architecture::Llama,
        "qwen2" => Architecture::Qwen2,
        other => {
            return Err(ModelError::Gguf {
                path: file.path().to_path_buf(),
                problem: format!(
                    "architecture `{other}` (general.architecture) is not supported (supported: llama, qwen2)"
                ),
            });
        }
    };
    Ok((architecture, name.to_string()))
}

/// Reads the configuration from the metadata: every value the engine uses
/// from its key, refusing what it does not implement by name.
fn read_config(file: &GgufFile) -> Result<Config> {
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
        "expert_count",
        "attention.q_lora_rank",
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
    let qkv_bias = file.tensor("blk.0.attn_q.bias").is_some();
    let o_bias = file.tensor("blk.0.attn_output.bias").is_some();
    if architecture == Architecture::Qwen2 && !qkv_bias {
        return Err(invalid("a qwen2 model without `blk.0.attn_q.bias`".into()));
    }
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

/// The tensor `name`, or the error naming it.
fn tensor<'f>(file: &'f GgufFile, name: &str) -> Result<&'f TensorInfo> {
    file.tensor(name).ok_or_else(|| ModelError::Gguf {
        path: file.path().to_path_buf(),
        problem: format!("tensor `{name}` is missing"),
    })
}

/// The values of a dense (F32, F16, BF16) or quantized tensor as f32.
fn dense_values(file: &GgufFile, tensor: &TensorInfo) -> Result<Vec<f32>> {
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
fn read_vocabulary(file: &GgufFile) -> Result<Option<GgufVocabulary>> {
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

/// The GGUF name of a tensor the config lists.
pub(crate) fn gguf_name(role: TensorRole) -> String {
    match role {
        TensorRole::Embedding => "token_embd.weight".into(),
        TensorRole::FinalNorm => "output_norm.weight".into(),
        TensorRole::LmHead => "output.weight".into(),
        TensorRole::Layer { index, tensor } => {
            let name = match tensor {
                LayerTensor::InputNorm => "attn_norm.weight",
                LayerTensor::QueryProjection => "attn_q.weight",
                LayerTensor::KeyProjection => "attn_k.weight",
                LayerTensor::ValueProjection => "attn_v.weight",
                LayerTensor::QueryBias => "attn_q.bias",
                LayerTensor::KeyBias => "attn_k.bias",
                LayerTensor::ValueBias => "attn_v.bias",
                LayerTensor::OutputProjection => "attn_output.weight",
                LayerTensor::OutputBias => "attn_output.bias",
                LayerTensor::PostAttentionNorm => "ffn_norm.weight",
                LayerTensor::GateProjection => "ffn_gate.weight",
                LayerTensor::UpProjection => "ffn_up.weight",
                LayerTensor::DownProjection => "ffn_down.weight",
            };
            format!("blk.{index}.{name}")
        }
    }
}

/// The heads whose rows llama.cpp's converter interleaved, for a tensor of
/// the `llama` architecture (`None`: its rows are as transformers has them).
fn permuted_heads(config: &Config, role: TensorRole) -> Option<usize> {
    if config.architecture != Architecture::Llama {
        return None;
    }
    match role {
        TensorRole::Layer {
            tensor: LayerTensor::QueryProjection | LayerTensor::QueryBias,
            ..
        } => Some(config.num_heads),
        TensorRole::Layer {
            tensor: LayerTensor::KeyProjection | LayerTensor::KeyBias,
            ..
        } => Some(config.num_kv_heads),
        _ => None,
    }
}

/// The file's row for row `row` of transformers' layout, where the
/// converter interleaved `heads` heads of `head_rows` rows: within a head,
/// row `j · half + i` of transformers' layout is the file's row `2i + j`.
pub(crate) fn file_row(row: usize, head_rows: usize) -> usize {
    let half = head_rows / 2;
    let (head, within) = (row / head_rows, row % head_rows);
    let (pair, index) = (within / half, within % half);
    head * head_rows + 2 * index + pair
}

impl Weights {
    /// Places the weights of `model` on `device`. Dense tensors take the
    /// model's dense dtype (a file's one dense matrix dtype, else f32 where
    /// the device multiplies quantized blocks, else bf16); quantized
    /// matrices stay in their blocks where the device has the kernels and
    /// are dequantized to the dense dtype otherwise (the returned note says
    /// so).
    pub fn from_gguf(
        model: &GgufModel,
        device: &Device,
        options: LoadOptions,
    ) -> Result<(Weights, Option<String>)> {
        let config = &model.config;
        let file = &model.file;
        let partition = Partition::whole(config);
        let mut quantized_in_file = false;
        let mut dense_matrix_dtypes: Vec<DType> = Vec::new();
        for spec in config.tensors() {
            let info = tensor(file, &gguf_name(spec.role))?;
            match file.tensor_format(info)? {
                WeightFormat::Quantized(_) => quantized_in_file |= spec.shape.len() == 2,
                WeightFormat::Dense(dtype)
                    if spec.shape.len() == 2 && !dense_matrix_dtypes.contains(&dtype) =>
                {
                    dense_matrix_dtypes.push(dtype)
                }
                WeightFormat::Dense(_) => {}
            }
        }
        let keeps_blocks = quantized_in_file
            && QuantizedLinear::new(
                &kernelscope::ops::registry(),
                device,
                QuantFormat::Q8_0,
                Default::default(),
            )
            .is_ok();
        let dtype = match dense_matrix_dtypes.as_slice() {
            // The vectors (norms, biases) take the matrices' dtype: kept
            // only where that rounds none of them, as for a file converted
            // from a checkpoint of that dtype; else everything runs in f32.
            [only] if !quantized_in_file && vectors_fit(file, config, *only)? => *only,
            [_] if !quantized_in_file => DType::F32,
            _ if keeps_blocks => DType::F32,
            _ => DType::BF16,
        };
        let note = (quantized_in_file && !keeps_blocks).then(|| {
            format!(
                "quantized weights dequantized to {dtype} at load ({} has no quantized kernels yet)",
                device.name()
            )
        });
        // Bounds before allocating: what the weights take on the device.
        let mut total = 0u64;
        for spec in config.tensors() {
            let info = tensor(file, &gguf_name(spec.role))?;
            let format = placed_format(file.tensor_format(info)?, spec.shape.len(), keeps_blocks, dtype);
            let (rows, columns) = matrix_shape(&spec.shape);
            total += format.matrix_bytes(rows, columns).unwrap_or(usize::MAX) as u64;
        }
        if !keeps_blocks || !device.capabilities().maps_files_in_place {
            check_fits(device, "the weights", total)?;
        }
        let progress = progress_bar(total as usize, options.quiet, "loading weights");
        let mut names = config.tensors().map(|spec| spec.role);
        let result = Self::assemble(config, &partition, dtype, |name, shape, split| {
            debug_assert!(matches!(split, Split::Whole));
            let role = names
                .next()
                .expect("assemble asks for the tensors in the config's order");
            debug_assert_eq!(name, role.name());
            let info = tensor(file, &gguf_name(role))?;
            let placed = place(
                file,
                info,
                shape,
                permuted_heads(config, role),
                keeps_blocks,
                dtype,
                device,
            )?;
            progress.inc(placed.0.byte_len() as u64);
            Ok(placed)
        });
        progress.finish_and_clear();
        Ok((result?, note))
    }
}

/// Whether every vector of the model (norms, biases) is exactly
/// representable in `dtype`.
fn vectors_fit(file: &GgufFile, config: &Config, dtype: DType) -> Result<bool> {
    for spec in config.tensors().filter(|spec| spec.shape.len() == 1) {
        let info = tensor(file, &gguf_name(spec.role))?;
        let values = dense_values(file, info)?;
        let exact = values.iter().all(|&value| match dtype {
            DType::F16 => f16::from_f32(value).to_f32().to_bits() == value.to_bits(),
            DType::BF16 => bf16::from_f32(value).to_f32().to_bits() == value.to_bits(),
            _ => true,
        });
        if !exact {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `[rows, columns]` of a shape (a vector is one row).
fn matrix_shape(shape: &[usize]) -> (usize, usize) {
    match shape {
        [rows, columns] => (*rows, *columns),
        [columns] => (1, *columns),
        _ => (shape.iter().product(), 1),
    }
}

/// The format a tensor of `format` takes on the device.
fn placed_format(format: WeightFormat, rank: usize, keeps_blocks: bool, dtype: DType) -> WeightFormat {
    match format {
        WeightFormat::Quantized(quant) if keeps_blocks && rank == 2 => WeightFormat::Quantized(quant),
        _ => WeightFormat::Dense(dtype),
    }
}

/// One tensor on the device in the format it takes there, its rows put
/// back in transformers' order where the converter permuted them.
#[allow(clippy::too_many_arguments)]
fn place(
    file: &GgufFile,
    info: &TensorInfo,
    shape: &[usize],
    permuted_heads: Option<usize>,
    keeps_blocks: bool,
    dtype: DType,
    device: &Device,
) -> Result<(Buffer, WeightFormat)> {
    let found: Vec<usize> = info.shape().iter().map(|&d| d as usize).collect();
    let expected_shape = if shape.len() == 1 {
        vec![shape[0]]
    } else {
        shape.to_vec()
    };
    if found != expected_shape {
        return Err(ModelError::TensorShape {
            path: file.path().to_path_buf(),
            name: info.name().to_string(),
            expected: expected_shape,
            found,
        });
    }
    let source = file.tensor_format(info)?;
    let format = placed_format(source, shape.len(), keeps_blocks, dtype);
    let (rows, columns) = matrix_shape(shape);
    let bytes = file.tensor_bytes(info);
    let source_row_bytes = bytes.len() / rows.max(1);
    let order: Option<Vec<usize>> = permuted_heads.map(|heads| {
        let head_rows = rows / heads;
        (0..rows).map(|row| file_row(row, head_rows)).collect()
    });
    let source_row = |row: usize| {
        let row = order.as_ref().map_or(row, |order| order[row]);
        &bytes[row * source_row_bytes..(row + 1) * source_row_bytes]
    };
    match format {
        WeightFormat::Quantized(_) => {
            let device_shape = [rows, source_row_bytes];
            if order.is_none() && device.capabilities().maps_files_in_place {
                let mapped = file.mapped_tensor(info);
                return Ok((
                    device.buffer_from_mapped(mapped.map, mapped.offset, DType::U8, &device_shape)?,
                    format,
                ));
            }
            let mut gathered = Vec::with_capacity(bytes.len());
            (0..rows).for_each(|row| gathered.extend_from_slice(source_row(row)));
            let buffer = device.alloc(DType::U8, &device_shape)?;
            buffer.write_bytes(&gathered)?;
            Ok((buffer, format))
        }
        WeightFormat::Dense(target) => {
            let device_shape = shape.to_vec();
            if source == WeightFormat::Dense(target)
                && order.is_none()
                && device.capabilities().maps_files_in_place
            {
                let mapped = file.mapped_tensor(info);
                if (mapped.map.as_ptr() as usize + mapped.offset).is_multiple_of(target.size_in_bytes()) {
                    return Ok((
                        device.buffer_from_mapped(mapped.map, mapped.offset, target, &device_shape)?,
                        format,
                    ));
                }
            }
            let failed = |error: kernelscope::quant::QuantError| ModelError::Gguf {
                path: file.path().to_path_buf(),
                problem: format!("tensor `{}`: {error}", info.name()),
            };
            let element = target.size_in_bytes();
            let mut out = vec![0u8; rows * columns * element];
            out.par_chunks_mut(columns * element)
                .enumerate()
                .try_for_each_init(
                    || vec![0.0f32; columns],
                    |values, (row, destination)| {
                        let bytes = source_row(row);
                        match source {
                            WeightFormat::Dense(dtype) => widen(dtype, bytes, values),
                            WeightFormat::Quantized(quant) => {
                                quant.dequantize_row(bytes, values).map_err(failed)?
                            }
                        }
                        narrow(target, values, destination);
                        Ok::<(), ModelError>(())
                    },
                )?;
            let buffer = device.alloc(target, &device_shape)?;
            buffer.write_bytes(&out)?;
            Ok((buffer, format))
        }
    }
}

/// `values` rounded to `dtype` (nearest, ties to even) as little-endian bytes.
fn narrow(dtype: DType, values: &[f32], out: &mut [u8]) {
    match dtype {
        DType::F32 => values
            .iter()
            .zip(out.chunks_exact_mut(4))
            .for_each(|(v, o)| o.copy_from_slice(&v.to_le_bytes())),
        DType::F16 => values
            .iter()
            .zip(out.chunks_exact_mut(2))
            .for_each(|(v, o)| o.copy_from_slice(&f16::from_f32(*v).to_le_bytes())),
        DType::BF16 => values
            .iter()
            .zip(out.chunks_exact_mut(2))
            .for_each(|(v, o)| o.copy_from_slice(&bf16::from_f32(*v).to_le_bytes())),
        other => unreachable!("{other} is not a dense weight dtype"),
    }
}
