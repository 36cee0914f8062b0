//! Placing a GGUF file's tensors on a device as [`Weights`]: each tensor
//! found by its GGUF name, the `llama` architecture's interleaved q/k rows
//! put back, quantized matrices kept in their blocks where the device has
//! the kernels (laid out as its kernels read them: ggml's blocks on the
//! CPU, mapped in place; planes on CUDA) and dequantized to the dense dtype
//! elsewhere.

use std::ops::Range;

use half::{bf16, f16};
use kernelscope::ops::WeightFormat;
use kernelscope::ops::quantized::linear::{BlockLayout, QuantizedLinear};
use kernelscope::quant::QuantFormat;
use kernelscope::{Buffer, DType, Device};
use rayon::prelude::*;

use super::config::{dense_values, tensor, widen};
use super::model::GgufModel;
use crate::config::shard::{Partition, Split};
use crate::config::{Architecture, Config, LayerTensor, TensorRole};
use crate::error::{ModelError, Result};
use crate::gguf::{GgufFile, TensorInfo};
use crate::loader::LoadOptions;
use crate::progress::progress_bar;
use crate::weights::{Weights, check_fits};

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
                LayerTensor::QueryNorm => "attn_q_norm.weight",
                LayerTensor::KeyNorm => "attn_k_norm.weight",
                LayerTensor::OutputProjection => "attn_output.weight",
                LayerTensor::OutputBias => "attn_output.bias",
                LayerTensor::PostAttentionNorm => "ffn_norm.weight",
                LayerTensor::GateProjection => "ffn_gate.weight",
                LayerTensor::UpProjection => "ffn_up.weight",
                LayerTensor::DownProjection => "ffn_down.weight",
                LayerTensor::Router => "ffn_gate_inp.weight",
                LayerTensor::ExpertGate => "ffn_gate_exps.weight",
                LayerTensor::ExpertUp => "ffn_up_exps.weight",
                LayerTensor::ExpertDown => "ffn_down_exps.weight",
            };
            format!("blk.{index}.{name}")
        }
    }
}

/// Every tensor `config` lists as (transformers' name, GGUF name):
/// `model.layers.3.mlp.experts.gate_proj` is `blk.3.ffn_gate_exps.weight`.
pub fn gguf_names(config: &Config) -> Vec<(String, String)> {
    config
        .tensors()
        .map(|spec| (spec.name, gguf_name(spec.role)))
        .collect()
}

/// The heads whose rows llama.cpp's converter interleaved, for a tensor of
/// the `llama` architecture (`None`: its rows are as transformers has them).
pub(crate) fn permuted_heads(config: &Config, role: TensorRole) -> Option<usize> {
    if !matches!(
        config.architecture,
        Architecture::Llama | Architecture::Mistral | Architecture::Mixtral
    ) {
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
    /// Places `partition`'s share of the weights of `model` on `device`
    /// (all of them where the model is not split). Dense tensors take the
    /// model's dense dtype (a file's one dense matrix dtype, else f32 where
    /// the device multiplies quantized blocks, else bf16); quantized
    /// matrices stay in their blocks where the device has the kernels and
    /// are dequantized to the dense dtype otherwise (the returned note says
    /// so).
    pub fn from_gguf(
        model: &GgufModel,
        partition: &Partition,
        device: &Device,
        options: LoadOptions,
    ) -> Result<(Weights, Option<String>)> {
        let config = &model.config;
        let file = &model.file;
        let mut quantized_in_file = false;
        let mut dense_matrix_dtypes: Vec<DType> = Vec::new();
        for spec in config.tensors() {
            let info = tensor(file, &gguf_name(spec.role))?;
            // A router is a matrix llama.cpp keeps in F32 whatever the
            // file's type: it does not say what the file's dtype is.
            let router = matches!(
                spec.role,
                TensorRole::Layer {
                    tensor: LayerTensor::Router,
                    ..
                }
            );
            match file.tensor_format(info)? {
                WeightFormat::Quantized(_) => quantized_in_file |= spec.shape.len() >= 2,
                WeightFormat::Dense(dtype)
                    if spec.shape.len() == 2 && !router && !dense_matrix_dtypes.contains(&dtype) =>
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
            // One dtype that would round a vector, or several dense dtypes:
            // f32 holds every one of them exactly.
            _ if !quantized_in_file => DType::F32,
            _ if keeps_blocks => DType::F32,
            _ => DType::BF16,
        };
        // Stacked experts: quantized ones stay in their blocks where the
        // device multiplies blocks (as the other matrices do) and become
        // bf16 elsewhere; where the other dense tensors take f32, 16-bit
        // experts keep their dtype (a sparse model's experts are most of it;
        // f32 would double them).
        let target_of = |role: TensorRole, info: &TensorInfo| -> Result<DType> {
            let stacked = matches!(role, TensorRole::Layer { tensor, .. } if tensor.is_stacked_experts());
            if !stacked || dtype != DType::F32 {
                return Ok(dtype);
            }
            Ok(match file.tensor_format(info)? {
                WeightFormat::Dense(source) => source,
                WeightFormat::Quantized(_) => DType::BF16,
            })
        };
        check_expert_formats(file, config)?;
        let mut notes = Vec::new();
        if quantized_in_file && !keeps_blocks {
            notes.push(format!(
                "quantized weights dequantized to {dtype} at load ({} has no quantized kernels yet)",
                device.name()
            ));
        }
        let note = (!notes.is_empty()).then(|| notes.join("; "));
        // Bounds before allocating: what the weights take on the device.
        let mut total = 0u64;
        for spec in config.tensors() {
            let info = tensor(file, &gguf_name(spec.role))?;
            let format = placed_format(
                file.tensor_format(info)?,
                spec.shape.len(),
                keeps_blocks,
                target_of(spec.role, info)?,
            );
            let split = partition.split(spec.role.dimensions(), config);
            let (rows, columns) = matrix_shape(&split.shape(&spec.shape));
            // A share that cuts blocks has no size: placing it is refused
            // below, naming the tensor.
            total += format.matrix_bytes(rows, columns).unwrap_or(0) as u64;
        }
        if !keeps_blocks || !device.capabilities().maps_files_in_place {
            check_fits(device, "the weights", total)?;
        }
        let progress = progress_bar(total as usize, options.quiet, "loading weights");
        let result = Self::assemble(config, partition, dtype, |spec, split| {
            let (role, shape) = (spec.role, spec.shape.as_slice());
            let info = tensor(file, &gguf_name(role))?;
            let target = target_of(role, info)?;
            let placed = place(
                file,
                info,
                shape,
                split,
                permuted_heads(config, role),
                keeps_blocks,
                target,
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

/// `[rows, columns]` of a shape (a vector is one row; stacked experts'
/// `[experts, rows, columns]` are `experts · rows` rows).
fn matrix_shape(shape: &[usize]) -> (usize, usize) {
    match shape {
        [columns] => (1, *columns),
        [outer @ .., columns] => (outer.iter().product(), *columns),
        [] => (1, 1),
    }
}

/// The format a tensor of `format` takes on the device.
fn placed_format(format: WeightFormat, rank: usize, keeps_blocks: bool, dtype: DType) -> WeightFormat {
    match format {
        WeightFormat::Quantized(quant) if keeps_blocks && rank >= 2 => WeightFormat::Quantized(quant),
        _ => WeightFormat::Dense(dtype),
    }
}

/// The source row of each row of a rank's share.
type RowOf = Box<dyn Fn(usize) -> usize + Sync>;

/// One tensor (this rank's `split` of it) on the device in the format it
/// takes there, its rows put back in transformers' order where the
/// converter permuted them. A split of a quantized matrix's columns must
/// fall on whole blocks; one that does not is refused naming the tensor.
#[allow(clippy::too_many_arguments)]
fn place(
    file: &GgufFile,
    info: &TensorInfo,
    shape: &[usize],
    split: &Split,
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
            described_by: "the file's metadata",
            path: file.path().to_path_buf(),
            name: info.name().to_string(),
            expected: expected_shape,
            found,
        });
    }
    let source = file.tensor_format(info)?;
    let format = placed_format(source, shape.len(), keeps_blocks, dtype);
    let (all_rows, all_columns) = matrix_shape(shape);
    let bytes = file.tensor_bytes(info);
    let source_row_bytes = bytes.len() / all_rows.max(1);
    let order: Option<Vec<usize>> = permuted_heads.map(|heads| {
        let head_rows = all_rows / heads;
        (0..all_rows).map(|row| file_row(row, head_rows)).collect()
    });
    // This rank's rows and columns (a vector's elements split as columns
    // of its one row).
    // (A stacked expert tensor's rows are its experts' rows one after
    // another: a share of each expert's rows is every expert's run.)
    let (row_of, rows, column_range): (RowOf, usize, Range<usize>) = match (split, shape.len()) {
        (Split::Whole, _) => (Box::new(|row| row), all_rows, 0..all_columns),
        (Split::Rows(range), 1) | (Split::Columns(range), _) => {
            (Box::new(|row| row), all_rows, range.clone())
        }
        (Split::Rows(range), _) => {
            let start = range.start;
            (Box::new(move |row| start + row), range.len(), 0..all_columns)
        }
        (Split::ExpertRows(range), _) => {
            let (expert_rows, share, start) = (shape[1], range.len(), range.start);
            (
                Box::new(move |row| (row / share) * expert_rows + start + row % share),
                shape[0] * share,
                0..all_columns,
            )
        }
    };
    let columns = column_range.len();
    // The bytes of this rank's columns within a row of the source format.
    let column_bytes = match source {
        WeightFormat::Dense(source_dtype) => {
            let size = source_dtype.size_in_bytes();
            column_range.start * size..column_range.end * size
        }
        WeightFormat::Quantized(quant) => {
            let block = quant.block_elements();
            if !column_range.start.is_multiple_of(block) || !column_range.end.is_multiple_of(block) {
                return Err(ModelError::Gguf {
                    path: file.path().to_path_buf(),
                    problem: format!(
                        "tensor `{}`: tensor parallelism gives a rank columns {}..{}, which cut {quant}'s blocks of {block} (run with fewer ranks, or a file whose split falls on whole blocks)",
                        info.name(),
                        column_range.start,
                        column_range.end
                    ),
                });
            }
            let block_bytes = quant.block_bytes();
            column_range.start / block * block_bytes..column_range.end / block * block_bytes
        }
    };
    let whole = matches!(split, Split::Whole);
    let source_row = |row: usize| {
        let row = row_of(row);
        let row = order.as_ref().map_or(row, |order| order[row]);
        &bytes[row * source_row_bytes..(row + 1) * source_row_bytes][column_bytes.clone()]
    };
    let shape = &split.shape(shape)[..];
    match format {
        WeightFormat::Quantized(quant) => {
            let layout = BlockLayout::of(device);
            if whole
                && order.is_none()
                && layout == BlockLayout::Blocks
                && device.capabilities().maps_files_in_place
            {
                let mapped = file.mapped_tensor(info);
                let buffer = device.buffer_from_mapped(
                    mapped.map,
                    mapped.offset,
                    DType::U8,
                    &[rows, source_row_bytes],
                )?;
                return Ok((stacked_rows(buffer, shape)?, format));
            }
            // The rows in the order and layout the device's kernels read
            // (planes on CUDA: the same bytes, each field together).
            let arranged = layout.arrange(quant, rows, source_row);
            let buffer = device.alloc(DType::U8, &[rows, arranged.len() / rows.max(1)])?;
            buffer.write_bytes(&arranged)?;
            Ok((stacked_rows(buffer, shape)?, format))
        }
        WeightFormat::Dense(target) => {
            let device_shape = shape.to_vec();
            if source == WeightFormat::Dense(target)
                && whole
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
                        destination.copy_from_slice(&crate::synthetic::encode(values, target)?);
                        Ok::<(), ModelError>(())
                    },
                )?;
            let buffer = device.alloc(target, &device_shape)?;
            buffer.write_bytes(&out)?;
            Ok((buffer, format))
        }
    }
}

/// A quantized tensor's rows of blocks `[rows, row_bytes]`, as stacked
/// experts `[experts, rows, row_bytes]` where the tensor is 3-D.
fn stacked_rows(buffer: Buffer, shape: &[usize]) -> Result<Buffer> {
    match shape {
        [experts, rows, _] => {
            let row_bytes = buffer.shape()[1];
            Ok(buffer.reshape(&[*experts, *rows, row_bytes])?)
        }
        _ => Ok(buffer),
    }
}

/// Refuses a layer whose stacked gate and up experts are stored in
/// different formats (the gate/up kernels read both rows in one format),
/// naming the tensors.
fn check_expert_formats(file: &GgufFile, config: &Config) -> Result<()> {
    for layer in 0..config.num_layers {
        let format_of = |tensor: LayerTensor| -> Result<Option<WeightFormat>> {
            let role = TensorRole::Layer { index: layer, tensor };
            match file.tensor(&gguf_name(role)) {
                Some(info) => Ok(Some(file.tensor_format(info)?)),
                None => Ok(None),
            }
        };
        if let (Some(gate), Some(up)) = (
            format_of(LayerTensor::ExpertGate)?,
            format_of(LayerTensor::ExpertUp)?,
        ) && gate != up
        {
            return Err(ModelError::Gguf {
                path: file.path().to_path_buf(),
                problem: format!(
                    "`blk.{layer}.ffn_gate_exps.weight` is {gate} but `blk.{layer}.ffn_up_exps.weight` is {up}: experts whose gate and up differ in format are not implemented"
                ),
            });
        }
    }
    Ok(())
}
