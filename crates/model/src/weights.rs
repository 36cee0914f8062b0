//! The model's weights as device buffers, with the shape of each written
//! where it is declared. Loaded from a checkpoint (mapped in place on the
//! CPU) or generated from a preset's seed.

use std::path::Path;

use kernelscope::ops::WeightFormat;
use kernelscope::ops::synthetic::{Cut, SyntheticFill};
use kernelscope::{Buffer, DType, Device};

use crate::config::shard::{Partition, Split};
use crate::config::{Config, LayerTensor, TensorRole, TensorSpec};
use crate::error::{MemoryRemedy, ModelError, Result};
use crate::linear::{Linear, Parallel};
use crate::loader::{Checkpoint, LoadOptions};
use crate::progress::progress_bar;
use crate::synthetic::{self, SyntheticOptions};

pub use crate::feed_forward::{ExpertWeights, FeedForward};

/// A tensor on the device and how it stores its values.
type PlacedTensor = (Buffer, WeightFormat);

/// One decoder layer's weights. `hidden = hidden_size`, `q = heads * head_dim`,
/// `kv = kv_heads * head_dim`, `inter = intermediate_size`; shapes are the
/// whole model's (a split model's rank holds its share, as each
/// [`Linear`]'s `parallel` says).
#[derive(Clone, Debug)]
pub struct LayerWeights {
    /// `[hidden]` RMSNorm before attention.
    pub input_norm: Buffer,
    /// `[q, hidden]`, with a `[q]` bias where the architecture has q/k/v biases.
    pub query: Linear,
    /// `[kv, hidden]` (bias `[kv]`).
    pub key: Linear,
    /// `[kv, hidden]` (bias `[kv]`).
    pub value: Linear,
    /// `[head_dim]` RMSNorm of each query head before RoPE, where the
    /// architecture has it (Qwen3's `q_norm`).
    pub query_norm: Option<Buffer>,
    /// `[head_dim]` RMSNorm of each key head before RoPE (`k_norm`).
    pub key_norm: Option<Buffer>,
    /// `[hidden, q]` o_proj, with a `[hidden]` bias where the architecture has one.
    pub output: Linear,
    /// `[hidden]` RMSNorm before the MLP.
    pub post_attention_norm: Buffer,
    /// The MLP: dense, or a mixture of experts.
    pub feed_forward: FeedForward,
}

/// All weights of a model: dense in one dtype, or (from a GGUF file)
/// with some matrices in quantized blocks, each [`Linear`] saying which.
#[derive(Clone, Debug)]
pub struct Weights {
    /// The dtype of every dense tensor (norms, biases, dense matrices), and
    /// of the activations that feed a GEMM.
    pub dtype: DType,
    /// `[vocab, hidden]`.
    pub embedding: Buffer,
    /// How `embedding` stores the table.
    pub embedding_format: WeightFormat,
    /// One entry per layer.
    pub layers: Vec<LayerWeights>,
    /// `[hidden]` final RMSNorm.
    pub final_norm: Buffer,
    /// `[vocab, hidden]`; the embedding table itself when tied.
    pub lm_head: Linear,
}

impl Weights {
    /// Builds `partition`'s share of the weights by asking
    /// `tensor(name, whole shape, split)` for each one, in the order of the
    /// config's tensor list, and placing each by its role. Only rank 0 keeps
    /// o_proj's bias: it is added once, before the ranks' partial sums meet.
    pub(crate) fn assemble(
        config: &Config,
        partition: &Partition,
        dtype: DType,
        mut tensor: impl FnMut(&TensorSpec, &Split) -> Result<(Buffer, WeightFormat)>,
    ) -> Result<Self> {
        let mut embedding = None;
        let mut final_norm = None;
        let mut lm_head = None;
        let mut layers: Vec<[Option<(PlacedTensor, Split)>; LayerTensor::ALL.len()]> =
            (0..config.num_layers).map(|_| Default::default()).collect();
        for spec in config.tensors() {
            let split = partition.split(spec.role.dimensions(), config);
            let buffer = tensor(&spec, &split)?;
            match spec.role {
                TensorRole::Embedding => embedding = Some((buffer, split)),
                TensorRole::Layer { index, tensor } => layers[index][tensor as usize] = Some((buffer, split)),
                TensorRole::FinalNorm => final_norm = Some(buffer.0),
                TensorRole::LmHead => lm_head = Some((buffer, split)),
            }
        }
        const LISTED: &str = "the config's tensor list names it";
        let (embedding, embedding_split) = embedding.expect(LISTED);
        let layers = layers
            .into_iter()
            .map(|mut slots| {
                let query_norm = slots[LayerTensor::QueryNorm as usize]
                    .take()
                    .map(|((norm, _), _)| norm);
                let key_norm = slots[LayerTensor::KeyNorm as usize]
                    .take()
                    .map(|((norm, _), _)| norm);
                let stacked = |slots: &mut [Option<(PlacedTensor, Split)>], tensor: LayerTensor| {
                    slots[tensor as usize]
                        .take()
                        .map(|((buffer, format), _)| (buffer, format))
                };
                let expert_gate = stacked(&mut slots, LayerTensor::ExpertGate);
                let expert_up = stacked(&mut slots, LayerTensor::ExpertUp);
                let expert_down = stacked(&mut slots, LayerTensor::ExpertDown);
                let mut take = |tensor: LayerTensor| slots[tensor as usize].take();
                let mut linear = |weight: LayerTensor, bias: Option<LayerTensor>| {
                    let ((weight, format), split) = take(weight).expect(LISTED);
                    let parallel = Parallel::of(&split, false);
                    let bias = bias.and_then(&mut take).map(|((bias, _), _)| bias);
                    let model_has_bias = bias.is_some();
                    // A partial sum's bias is added once, by rank 0.
                    let bias = bias.filter(|_| parallel != Parallel::SplitInputs || partition.rank == 0);
                    Linear::new(weight, format, bias, model_has_bias, parallel)
                };
                LayerWeights {
                    query: linear(LayerTensor::QueryProjection, Some(LayerTensor::QueryBias)),
                    key: linear(LayerTensor::KeyProjection, Some(LayerTensor::KeyBias)),
                    value: linear(LayerTensor::ValueProjection, Some(LayerTensor::ValueBias)),
                    query_norm,
                    key_norm,
                    output: linear(LayerTensor::OutputProjection, Some(LayerTensor::OutputBias)),
                    feed_forward: if let (Some((gate, format)), Some((up, _)), Some((down, down_format))) =
                        (expert_gate, expert_up, expert_down)
                    {
                        let experts = config.experts.as_ref().expect(LISTED);
                        FeedForward::Experts(ExpertWeights {
                            router: linear(LayerTensor::Router, None),
                            gate,
                            up,
                            down,
                            format,
                            down_format,
                            count: experts.count,
                            per_token: experts.per_token,
                        })
                    } else {
                        FeedForward::Dense {
                            gate: linear(LayerTensor::GateProjection, None),
                            up: linear(LayerTensor::UpProjection, None),
                            down: linear(LayerTensor::DownProjection, None),
                        }
                    },
                    input_norm: take(LayerTensor::InputNorm).expect(LISTED).0.0,
                    post_attention_norm: take(LayerTensor::PostAttentionNorm).expect(LISTED).0.0,
                }
            })
            .collect();
        // Tied: the LM head is the embedding table itself.
        let ((lm_head, lm_head_format), lm_head_split) =
            lm_head.unwrap_or_else(|| (embedding.clone(), embedding_split));
        let (embedding, embedding_format) = embedding;
        Ok(Weights {
            dtype,
            lm_head: Linear::new(
                lm_head,
                lm_head_format,
                None,
                false,
                Parallel::of(&lm_head_split, true),
            ),
            embedding,
            embedding_format,
            layers,
            final_norm: final_norm.expect(LISTED),
        })
    }

    /// Loads `partition`'s share of the weights of the checkpoint in
    /// `directory` onto `device`, reading only that share's bytes.
    pub fn load(
        directory: &Path,
        config: &Config,
        partition: &Partition,
        device: &Device,
        options: LoadOptions,
    ) -> Result<Self> {
        let checkpoint = Checkpoint::open(directory)?;
        let dtype = checkpoint.dtype()?;
        // Before listing tensors or allocating: the config must describe no
        // more than the files hold, and the weights must fit the device.
        let config_path = directory.join("config.json");
        // Where a whole-model check fails, the first tensor that differs
        // says why, by name: looked up, not loaded, and never more of them
        // than the files hold.
        let first_differing = || {
            config
                .tensors()
                .take(checkpoint.tensors.len() + 1)
                .find_map(|spec| {
                    let name = checkpoint.resolve_name(config, &spec);
                    let stacked =
                        matches!(spec.role, TensorRole::Layer { tensor, .. } if tensor.is_stacked_experts());
                    (!stacked)
                        .then(|| checkpoint.locate(&name, &spec.shape, dtype).err())
                        .flatten()
                })
        };
        if config.tensor_count() > checkpoint.tensors.len() {
            if let Some(error) = first_differing() {
                return Err(error);
            }
            return Err(ModelError::ConfigInvalid {
                path: config_path,
                problem: format!(
                    "describes {} tensors ({} layers) but the safetensors files hold {}",
                    config.tensor_count(),
                    config.num_layers,
                    checkpoint.tensors.len()
                ),
            });
        }
        let weight_bytes = config
            .checked_parameter_bytes(dtype.size_in_bytes() as u64)
            .expect("checked when the config was validated");
        if weight_bytes > checkpoint.total_bytes() {
            if let Some(error) = first_differing() {
                return Err(error);
            }
            return Err(ModelError::ConfigInvalid {
                path: config_path,
                problem: format!(
                    "describes {weight_bytes} bytes of {dtype} weights but the safetensors files hold {} bytes",
                    checkpoint.total_bytes()
                ),
            });
        }
        let share_bytes = share_bytes(config, partition, dtype);
        if !device.capabilities().maps_files_in_place {
            check_fits(device, "the weights", share_bytes)?;
        }
        let progress = progress_bar(share_bytes as usize, options.quiet, "loading weights");
        let element = dtype.size_in_bytes();
        let weights = Self::assemble(config, partition, dtype, |spec, split| {
            let shape = spec.shape.as_slice();
            if let TensorRole::Layer { index, tensor } = spec.role
                && tensor.is_stacked_experts()
            {
                // Gathered whole from the checkpoint's layout, then this
                // rank's share cut out of it.
                let whole = checkpoint.stacked_experts(config, index, tensor, dtype)?;
                let mut bytes = Vec::with_capacity(whole.len());
                for (start, length) in split.runs(shape) {
                    bytes.extend_from_slice(&whole[start * element..(start + length) * element]);
                }
                let buffer = device.alloc(dtype, &split.shape(shape))?;
                buffer.write_bytes(&bytes)?;
                progress.inc(buffer.byte_len() as u64);
                return Ok((buffer, WeightFormat::Dense(dtype)));
            }
            let name = checkpoint.resolve_name(config, spec);
            let location = checkpoint.locate(&name, shape, dtype)?;
            let map = &checkpoint.files[location.file].1;
            let runs = split.runs(shape);
            let cut = split.shape(shape);
            let buffer = match runs.as_slice() {
                // One run: the share is contiguous in the file.
                [(start, _)]
                    if (map.as_ptr() as usize + location.offset + start * element)
                        .is_multiple_of(element) =>
                {
                    device.buffer_from_mapped(map.clone(), location.offset + start * element, dtype, &cut)?
                }
                _ => {
                    // Columns of every row, or misaligned for its dtype
                    // (allowed by the format): gather a copy.
                    let mut bytes = Vec::with_capacity(runs.iter().map(|run| run.1).sum::<usize>() * element);
                    for &(start, length) in &runs {
                        let from = location.offset + start * element;
                        bytes.extend_from_slice(&map[from..from + length * element]);
                    }
                    let buffer = device.alloc(dtype, &cut)?;
                    buffer.write_bytes(&bytes)?;
                    buffer
                }
            };
            progress.inc(buffer.byte_len() as u64);
            Ok((buffer, WeightFormat::Dense(dtype)))
        })?;
        progress.finish_and_clear();
        Ok(weights)
    }

    /// Generates `partition`'s share of the seeded synthetic weights of
    /// `config` on `device`: the same values `gen-model` writes for these
    /// options (each rank makes only its share).
    pub fn synthetic(
        config: &Config,
        partition: &Partition,
        device: &Device,
        options: SyntheticOptions,
    ) -> Result<Self> {
        let SyntheticOptions { dtype, seed, quiet } = options;
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(ModelError::UnsupportedDtype(dtype));
        }
        let share_bytes = share_bytes(config, partition, dtype);
        check_fits(device, "the weights", share_bytes)?;
        let progress = progress_bar(share_bytes as usize, quiet, "generating weights");
        // Made on the device by a kernel (no host copy of the weights).
        let fill = SyntheticFill::new(&kernelscope::ops::registry(), device, dtype)?;
        let mut encoder = device.command_encoder();
        let weights = Self::assemble(config, partition, dtype, |spec, split| {
            let shape = &spec.shape;
            let generator = synthetic::TensorGenerator::new(&spec.name, shape, seed);
            let buffer = device.alloc(dtype, &split.shape(shape))?;
            // Each cut a block of rows of `columns` values from `first_column`
            // of the whole tensor's rows of `row_length`: the share, or for
            // a stacked expert tensor split by rows, each expert's share.
            let last = *shape.last().unwrap_or(&1) as u64;
            let cut = |row_length: u64, first_row: u64, first_column: u64, columns: u64| Cut {
                seed: generator.seed,
                row_length,
                first_row,
                first_column,
                columns,
                low: generator.low,
                high: generator.high,
            };
            let row_length = shape.iter().skip(1).product::<usize>() as u64;
            match split {
                Split::Whole => fill.encode(&mut encoder, &buffer, cut(row_length, 0, 0, row_length))?,
                Split::Rows(rows) => fill.encode(
                    &mut encoder,
                    &buffer,
                    cut(row_length, rows.start as u64, 0, row_length),
                )?,
                Split::Columns(columns) => fill.encode(
                    &mut encoder,
                    &buffer,
                    cut(last, 0, columns.start as u64, columns.len() as u64),
                )?,
                Split::ExpertRows(rows) => {
                    let (expert_rows, share) = (shape[1], rows.len() * shape[2]);
                    for expert in 0..shape[0] {
                        let first_row = (expert * expert_rows + rows.start) as u64;
                        fill.encode(
                            &mut encoder,
                            &buffer.slice(expert * share, share)?,
                            cut(last, first_row, 0, last),
                        )?;
                    }
                }
            }
            encoder.commit_labeled("generate weights")?;
            progress.inc(buffer.byte_len() as u64);
            Ok((buffer, WeightFormat::Dense(dtype)))
        })?;
        encoder.wait()?;
        progress.finish_and_clear();
        Ok(weights)
    }
}

impl Weights {
    /// Every weight matrix (projections, routers, experts, the LM head) as
    /// stored, with its format.
    fn matrices(&self) -> impl Iterator<Item = (&Buffer, WeightFormat)> + '_ {
        self.layers
            .iter()
            .flat_map(|layer| {
                [&layer.query, &layer.key, &layer.value, &layer.output]
                    .into_iter()
                    .map(|linear| (&linear.weight, linear.format))
                    .chain(layer.feed_forward.matrices())
            })
            .chain(std::iter::once((&self.lm_head.weight, self.lm_head.format)))
    }

    /// Bytes of this rank's weight matrices one token reads, as they are
    /// stored: every projection and the LM head, of a sparse layer the
    /// router and its chosen experts' share (the embedding table only where
    /// it is the tied LM head).
    pub(crate) fn matrix_bytes_per_token(&self) -> u64 {
        let attention: u64 = self
            .layers
            .iter()
            .flat_map(|layer| [&layer.query, &layer.key, &layer.value, &layer.output])
            .map(|linear| linear.weight.byte_len() as u64)
            .sum();
        let feed_forward: u64 = self
            .layers
            .iter()
            .map(|layer| layer.feed_forward.bytes_per_token())
            .sum();
        attention + feed_forward + self.lm_head.weight.byte_len() as u64
    }

    /// Bytes of the norms (the per-head ones too) and the biases (of rank 0's share, which holds
    /// every bias a split model adds once).
    pub(crate) fn vector_bytes(&self) -> u64 {
        let norms = self.layers.iter().flat_map(|layer| {
            [
                Some(&layer.input_norm),
                Some(&layer.post_attention_norm),
                layer.query_norm.as_ref(),
                layer.key_norm.as_ref(),
            ]
            .into_iter()
            .flatten()
        });
        let biases = self.layers.iter().flat_map(|layer| {
            [&layer.query, &layer.key, &layer.value, &layer.output]
                .into_iter()
                .filter_map(|linear| linear.held_bias())
        });
        norms
            .chain(biases)
            .chain(std::iter::once(&self.final_norm))
            .map(|vector| vector.byte_len() as u64)
            .sum()
    }

    /// The formats of the weight matrices beyond the dense dtype, for the
    /// ops to make their kernels.
    pub(crate) fn formats(&self) -> crate::engine::WeightFormats {
        let mut linear = Vec::new();
        let mut dense_linear = false;
        for (_, format) in self.matrices() {
            match format {
                WeightFormat::Quantized(format) if !linear.contains(&format) => linear.push(format),
                WeightFormat::Quantized(_) => {}
                WeightFormat::Dense(_) => dense_linear = true,
            }
        }
        crate::engine::WeightFormats {
            linear,
            dense_linear,
            head_norms: self.layers.iter().any(|layer| layer.query_norm.is_some()),
            embedding: self.embedding_format,
        }
    }
}

/// Bytes of `partition`'s share of the weights in `dtype`.
fn share_bytes(config: &Config, partition: &Partition, dtype: DType) -> u64 {
    config
        .tensors()
        .map(|spec| {
            let split = partition.split(spec.role.dimensions(), config);
            split.shape(&spec.shape).iter().product::<usize>() as u64
        })
        .sum::<u64>()
        * dtype.size_in_bytes() as u64
}

/// Refuses, before allocating, `bytes` of `what` that the device's free
/// memory cannot hold (where the device can tell).
pub(crate) fn check_fits(device: &Device, what: &str, bytes: u64) -> Result<()> {
    let Some(memory) = device.memory_info() else {
        return Ok(());
    };
    if bytes <= memory.free {
        return Ok(());
    }
    Err(ModelError::OutOfMemory {
        what: what.to_string(),
        needed_mib: bytes.div_ceil(1 << 20),
        available_mib: memory.free >> 20,
        device: device.name().to_string(),
        remedy: MemoryRemedy::None,
    })
}
