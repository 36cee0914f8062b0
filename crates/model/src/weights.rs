//! The model's weights as device buffers, with the shape of each written
//! where it is declared. Loaded from a checkpoint (mapped in place on the
//! CPU) or generated from a preset's seed.

use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use kernelscope::{Buffer, DType, Device};

use crate::config::{Config, LayerTensor, TensorRole};
use crate::error::{ModelError, Result};
use crate::loader::{Checkpoint, LoadOptions};
use crate::synthetic::{self, SyntheticOptions};

/// Show a progress bar when the weights are bigger than this.
const PROGRESS_BAR_BYTES: usize = 300 << 20;

/// One decoder layer's weights. `hidden = hidden_size`, `q = heads * head_dim`,
/// `kv = kv_heads * head_dim`, `inter = intermediate_size`.
#[derive(Clone, Debug)]
pub struct LayerWeights {
    /// `[hidden]` RMSNorm before attention.
    pub input_norm: Buffer,
    /// `[q, hidden]`.
    pub q_proj: Buffer,
    /// `[kv, hidden]`.
    pub k_proj: Buffer,
    /// `[kv, hidden]`.
    pub v_proj: Buffer,
    /// `[q]`, `[kv]`, `[kv]` when the architecture has q/k/v biases.
    pub qkv_bias: Option<[Buffer; 3]>,
    /// `[hidden, q]`.
    pub o_proj: Buffer,
    /// `[hidden]` when the architecture has an output bias.
    pub o_bias: Option<Buffer>,
    /// `[hidden]` RMSNorm before the MLP.
    pub post_attention_norm: Buffer,
    /// `[inter, hidden]`.
    pub gate_proj: Buffer,
    /// `[inter, hidden]`.
    pub up_proj: Buffer,
    /// `[hidden, inter]`.
    pub down_proj: Buffer,
}

/// All weights of a model, in one dtype.
#[derive(Clone, Debug)]
pub struct Weights {
    /// The weights' dtype.
    pub dtype: DType,
    /// `[vocab, hidden]`.
    pub embedding: Buffer,
    /// One entry per layer.
    pub layers: Vec<LayerWeights>,
    /// `[hidden]` final RMSNorm.
    pub final_norm: Buffer,
    /// `[vocab, hidden]`; the embedding table itself when tied.
    pub lm_head: Buffer,
}

impl Weights {
    /// Builds the weights by asking `tensor(name, shape)` for each one, in
    /// the order of the config's tensor list, and placing each by its role.
    fn assemble(
        config: &Config,
        dtype: DType,
        mut tensor: impl FnMut(&str, &[usize]) -> Result<Buffer>,
    ) -> Result<Self> {
        let mut embedding = None;
        let mut final_norm = None;
        let mut lm_head = None;
        let mut layers: Vec<[Option<Buffer>; LayerTensor::ALL.len()]> =
            (0..config.num_layers).map(|_| Default::default()).collect();
        for spec in config.tensors() {
            let buffer = tensor(&spec.name, &spec.shape)?;
            match spec.role {
                TensorRole::Embedding => embedding = Some(buffer),
                TensorRole::Layer { index, tensor } => layers[index][tensor as usize] = Some(buffer),
                TensorRole::FinalNorm => final_norm = Some(buffer),
                TensorRole::LmHead => lm_head = Some(buffer),
            }
        }
        const LISTED: &str = "the config's tensor list names it";
        let embedding = embedding.expect(LISTED);
        let layers = layers
            .into_iter()
            .map(|mut slots| {
                let mut take = |tensor: LayerTensor| slots[tensor as usize].take();
                let qkv_bias = match (
                    take(LayerTensor::QueryBias),
                    take(LayerTensor::KeyBias),
                    take(LayerTensor::ValueBias),
                ) {
                    (Some(q_bias), Some(k_bias), Some(v_bias)) => Some([q_bias, k_bias, v_bias]),
                    _ => None,
                };
                LayerWeights {
                    input_norm: take(LayerTensor::InputNorm).expect(LISTED),
                    q_proj: take(LayerTensor::QueryProjection).expect(LISTED),
                    k_proj: take(LayerTensor::KeyProjection).expect(LISTED),
                    v_proj: take(LayerTensor::ValueProjection).expect(LISTED),
                    qkv_bias,
                    o_proj: take(LayerTensor::OutputProjection).expect(LISTED),
                    o_bias: take(LayerTensor::OutputBias),
                    post_attention_norm: take(LayerTensor::PostAttentionNorm).expect(LISTED),
                    gate_proj: take(LayerTensor::GateProjection).expect(LISTED),
                    up_proj: take(LayerTensor::UpProjection).expect(LISTED),
                    down_proj: take(LayerTensor::DownProjection).expect(LISTED),
                }
            })
            .collect();
        Ok(Weights {
            dtype,
            // Tied: the LM head is the embedding table itself.
            lm_head: lm_head.unwrap_or_else(|| embedding.clone()),
            embedding,
            layers,
            final_norm: final_norm.expect(LISTED),
        })
    }

    /// Loads the weights of the checkpoint in `directory` onto `device`.
    pub fn load(directory: &Path, config: &Config, device: &Device, options: LoadOptions) -> Result<Self> {
        let checkpoint = Checkpoint::open(directory)?;
        let dtype = checkpoint.dtype()?;
        // Before listing tensors or allocating: the config must describe no
        // more than the files hold, and the weights must fit the device.
        let config_path = directory.join("config.json");
        if config.tensor_count() > checkpoint.tensors.len() {
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
            return Err(ModelError::ConfigInvalid {
                path: config_path,
                problem: format!(
                    "describes {weight_bytes} bytes of {dtype} weights but the safetensors files hold {} bytes",
                    checkpoint.total_bytes()
                ),
            });
        }
        if !device.capabilities().maps_files_in_place {
            check_fits(device, "the weights", weight_bytes)?;
        }
        let total_bytes = weight_bytes as usize;
        let progress = progress_bar(total_bytes, options.quiet, "loading weights");
        let weights = Self::assemble(config, dtype, |name, shape| {
            let location = checkpoint.locate(name, shape, dtype)?;
            let map = &checkpoint.files[location.file].1;
            let address = map.as_ptr() as usize + location.offset;
            let buffer = if address.is_multiple_of(dtype.size_in_bytes()) {
                device.buffer_from_mapped(map.clone(), location.offset, dtype, shape)?
            } else {
                // Misaligned for its dtype (allowed by the format): copy it.
                let buffer = device.alloc(dtype, shape)?;
                let length = buffer.byte_len();
                buffer.write_bytes(&map[location.offset..location.offset + length])?;
                buffer
            };
            progress.inc(buffer.byte_len() as u64);
            Ok(buffer)
        })?;
        progress.finish_and_clear();
        Ok(weights)
    }

    /// Generates the seeded synthetic weights of `config` on `device`: the
    /// same values `gen-model` writes for these options.
    pub fn synthetic(config: &Config, device: &Device, options: SyntheticOptions) -> Result<Self> {
        let SyntheticOptions { dtype, seed, quiet } = options;
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(ModelError::UnsupportedDtype(dtype));
        }
        let weight_bytes = config
            .checked_parameter_bytes(dtype.size_in_bytes() as u64)
            .expect("presets are valid configs");
        check_fits(device, "the weights", weight_bytes)?;
        let total_bytes = weight_bytes as usize;
        let progress = progress_bar(total_bytes, quiet, "generating weights");
        let weights = Self::assemble(config, dtype, |name, shape| {
            let bytes = synthetic::encode(&synthetic::tensor_values(name, shape, seed), dtype)?;
            let buffer = device.alloc(dtype, shape)?;
            buffer.write_bytes(&bytes)?;
            progress.inc(bytes.len() as u64);
            Ok(buffer)
        })?;
        progress.finish_and_clear();
        Ok(weights)
    }
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
        hint: String::new(),
    })
}

/// A byte-count progress bar on stderr, hidden when quiet or small.
pub(crate) fn progress_bar(total_bytes: usize, quiet: bool, message: &'static str) -> ProgressBar {
    if quiet || total_bytes < PROGRESS_BAR_BYTES {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total_bytes as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} ({eta})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message(message);
    bar
}
