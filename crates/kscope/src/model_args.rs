//! The arguments every model-running subcommand shares: which model, which
//! device, and how to open them.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use kernelscope::ops::matmul::MAX_COMPUTE_PROBE_SIZE;
use kernelscope::{DType, Device, DeviceOptions};
use kernelscope_model::{
    DEFAULT_PREFILL_CHUNK, LoadOptions, Model, SyntheticOptions, Tokenizer, looks_like_repo_id,
    resolve_hub_model,
};

/// Which model and device.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// A Hugging Face model directory (config.json, *.safetensors, optional
    /// tokenizer.json), or ORG/NAME of a model in the Hugging Face cache
    /// (HF_HUB_CACHE, HF_HOME or ~/.cache/huggingface/hub; never downloads).
    #[arg(long, value_name = "DIR|ORG/NAME", conflicts_with = "preset")]
    pub model: Option<PathBuf>,
    /// The revision of an ORG/NAME model: a branch, tag or commit in the cache (default main).
    #[arg(long, value_name = "REV", requires = "model")]
    pub revision: Option<String>,
    /// A synthetic preset generated in memory (tiny, tiny-qwen2, tiny-llama3,
    /// qwen2.5-0.5b, llama-3.2-1b, llama-3-8b, llama-3.1-8b, tinyllama-1.1b, llama-3-70b). Default: tiny.
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// Weight dtype of a preset generated in memory.
    #[arg(long, default_value = "bf16", value_parser = parse_weight_dtype)]
    pub dtype: DType,
    /// Seed of a preset's synthetic weights.
    #[arg(long, default_value_t = 0, value_name = "N", value_parser = crate::numbers::seed)]
    pub weights_seed: u64,
    /// Device: auto (CUDA when a GPU is usable, else the CPU), cpu, cuda or cuda:N.
    /// With --tp N, the first of N devices: N CPU devices, or N GPUs from it on.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Tensor parallelism: split the model over N devices (Megatron style,
    /// collectives through NCCL on GPUs, in-process on the CPU).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = crate::numbers::positive_count)]
    pub tp: usize,
    /// The devices of a split model, comma-separated (cuda:0,cuda:1 or
    /// cpu,cpu), one rank each in order; implies --tp with their count.
    #[arg(long, value_name = "LIST", conflicts_with = "device", value_delimiter = ',')]
    pub devices: Option<Vec<String>>,
    /// No progress bar while loading.
    #[arg(long)]
    pub quiet: bool,
    /// Prompt positions per forward pass: 1 runs a prompt position by
    /// position (as decode runs); larger values run chunks of that many as
    /// one pass, each projection one GEMM over the chunk.
    #[arg(long, default_value_t = DEFAULT_PREFILL_CHUNK, value_name = "N", value_parser = crate::numbers::positive_count)]
    pub prefill_chunk: usize,
    /// Element type of the KV cache (bf16, f16, f32). Default: the weights'
    /// dtype; f32 is the reference path.
    #[arg(long, value_name = "DTYPE", value_parser = parse_weight_dtype)]
    pub kv_dtype: Option<DType>,
}

/// `bf16`, `f16`, `f32`.
pub fn parse_weight_dtype(text: &str) -> Result<DType, String> {
    match text.to_ascii_lowercase().as_str() {
        "bf16" | "bfloat16" => Ok(DType::BF16),
        "f16" | "float16" => Ok(DType::F16),
        "f32" | "float32" => Ok(DType::F32),
        _ => Err(format!(
            "`{text}` is not a weight dtype: expected bf16, f16 or f32"
        )),
    }
}

/// An opened model with its device.
pub struct Opened {
    /// Rank 0's device (the only one unless split; `model.devices()` has all).
    pub device: Device,
    pub device_reason: String,
    pub model: Model,
    pub tokenizer: Option<Tokenizer>,
    /// The model directory, for a model read from files.
    pub directory: Option<PathBuf>,
}

/// Where a model's files are.
pub struct ModelLocation {
    /// The directory the model is read from.
    pub directory: PathBuf,
    /// The folder no output may overwrite a file of: the directory, or for
    /// a Hugging Face cache snapshot the repository's cache folder.
    pub protected: PathBuf,
}

impl ModelArgs {
    /// The directory of `--model`: a path as given, or ORG/NAME resolved in
    /// the Hugging Face cache. `None` for a preset.
    pub fn location(&self) -> Result<Option<ModelLocation>> {
        let Some(model) = &self.model else {
            if self.revision.is_some() {
                bail!("--revision applies to --model ORG/NAME");
            }
            return Ok(None);
        };
        if std::fs::symlink_metadata(model).is_ok() {
            if !model.is_dir() {
                bail!(
                    "{}: not a directory (expected a Hugging Face model directory)",
                    model.display()
                );
            }
            if self.revision.is_some() {
                bail!("--revision applies to --model ORG/NAME, not to a directory");
            }
            return Ok(Some(ModelLocation {
                directory: model.clone(),
                protected: model.clone(),
            }));
        }
        let text = model.to_string_lossy();
        if !looks_like_repo_id(&text) {
            bail!(
                "{}: no such directory (expected a Hugging Face model directory or ORG/NAME)",
                model.display()
            );
        }
        let snapshot = resolve_hub_model(&text, self.revision.as_deref())?;
        Ok(Some(ModelLocation {
            directory: snapshot.directory,
            protected: snapshot.repo_root,
        }))
    }

    /// The device spec of rank 0 (`--device`, or the first of `--devices`).
    pub fn first_device(&self) -> &str {
        match &self.devices {
            Some(devices) => devices.first().map_or("auto", String::as_str),
            None => &self.device,
        }
    }

    /// Opens every rank's device with `options`: `--devices` as listed, or
    /// `--tp` devices from `--device` on. The string says how rank 0's
    /// device was chosen.
    pub fn open_devices(&self, options: DeviceOptions) -> Result<(Vec<Device>, String)> {
        if let Some(specs) = &self.devices {
            if self.tp != 1 && self.tp != specs.len() {
                bail!(
                    "--tp {} but --devices lists {} devices: give one device per rank",
                    self.tp,
                    specs.len()
                );
            }
            let mut devices = Vec::with_capacity(specs.len());
            let mut reason = String::new();
            for spec in specs {
                let (device, why) =
                    Device::open(spec, options.clone()).with_context(|| format!("--devices: {spec}"))?;
                if devices.is_empty() {
                    reason = format!("{why} (--devices)");
                }
                devices.push(device);
            }
            return Ok((devices, reason));
        }
        let (first, reason) = Device::open(&self.device, options.clone())?;
        let mut devices = vec![first];
        for rank in 1..self.tp {
            let device = match &devices[0] {
                Device::Cpu(_) => Device::cpu_with(options.clone()),
                Device::Cuda(first) => {
                    let ordinal = first.ordinal() + rank;
                    Device::cuda_with(ordinal, options.clone())
                        .with_context(|| format!("--tp {}: rank {rank} needs GPU cuda:{ordinal}", self.tp))?
                }
            };
            devices.push(device);
        }
        Ok((devices, reason))
    }

    /// Opens the devices with `options`, then loads or generates the model
    /// (split over them with more than one).
    pub fn open(&self, options: DeviceOptions) -> Result<Opened> {
        let location = self.location()?;
        let (devices, device_reason) = self.open_devices(options)?;
        let device = devices[0].clone();
        let (model, tokenizer) = match &location {
            Some(location) => {
                let directory = &location.directory;
                let model = Model::load_split(directory, &devices, LoadOptions { quiet: self.quiet })?;
                (model, Tokenizer::from_directory(directory)?)
            }
            None => {
                let name = self.preset.as_deref().unwrap_or("tiny");
                let options = SyntheticOptions {
                    dtype: self.dtype,
                    seed: self.weights_seed,
                    quiet: self.quiet,
                };
                let model = Model::from_preset_split(name, &devices, options)
                    .with_context(|| format!("building preset {name}"))?;
                (model, None)
            }
        };
        let mut model = model;
        model.set_prefill_chunk(self.prefill_chunk)?;
        if let Some(dtype) = self.kv_dtype {
            model.set_kv_dtype(dtype)?;
        }
        Ok(Opened {
            device,
            device_reason,
            model,
            tokenizer,
            directory: location.map(|location| location.directory),
        })
    }
}

/// `--compute-size`: a GEMM side in 0..=16384, 0 skipping the probe.
pub fn compute_size(text: &str) -> Result<usize, String> {
    let size = crate::numbers::count(text)?;
    if size > MAX_COMPUTE_PROBE_SIZE {
        return Err(format!(
            "`{text}` is past the largest compute probe: expected a GEMM side in 0..={MAX_COMPUTE_PROBE_SIZE} (0 skips it)"
        ));
    }
    Ok(size)
}

/// One line describing the model's shape (and its split, when split).
pub fn describe(model: &Model) -> String {
    let config = model.config();
    let split = match model.collectives() {
        Some((library, link)) => format!(
            ", split over {} ranks ({}; {library}, {link})",
            model.ranks(),
            model
                .devices()
                .iter()
                .map(|device| device.name().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => String::new(),
    };
    format!(
        "{}: {}, {} layers, hidden {}, {} heads ({} kv), vocab {}, {:.1}M parameters, {}{split}",
        model.name(),
        config.architecture.class_name(),
        config.num_layers,
        config.hidden_size,
        config.num_heads,
        config.num_kv_heads,
        config.vocab_size,
        config.parameter_count() as f64 / 1e6,
        model.weights().dtype
    )
}
