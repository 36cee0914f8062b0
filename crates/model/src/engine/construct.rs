//! Building a [`Model`]: the config split over the ranks (threads of this
//! process, one per device, or processes of a launcher's group) and each
//! rank's shard built from its share of the weights, read from a
//! Hugging Face directory, placed from a GGUF file, or made for a preset.

use std::path::Path;

use kernelscope::{Communicator, Device};

use super::model::Model;
use super::shard::Shard;
use crate::config::Config;
use crate::config::shard::Partition;
use crate::error::{ModelError, Result};
use crate::gguf_model::GgufModel;
use crate::loader::LoadOptions;
use crate::presets::preset;
use crate::synthetic::SyntheticOptions;
use crate::weights::Weights;

/// Where a model's ranks run: threads of this process, one per device
/// (one device: not split), or this process alone as one rank of a group of
/// processes, holding its share only.
#[derive(Clone, Copy, Debug)]
pub enum Ranks<'a> {
    /// A rank per device, each a thread of this process.
    Threads(&'a [Device]),
    /// This process's rank of a group a launcher started
    /// ([`Communicator::join`]), on the communicator's device.
    Process(&'a Communicator),
}

impl<'a> From<&'a [Device]> for Ranks<'a> {
    fn from(devices: &'a [Device]) -> Self {
        Ranks::Threads(devices)
    }
}

impl<'a> From<&'a Vec<Device>> for Ranks<'a> {
    fn from(devices: &'a Vec<Device>) -> Self {
        Ranks::Threads(devices)
    }
}

impl<'a, const N: usize> From<&'a [Device; N]> for Ranks<'a> {
    fn from(devices: &'a [Device; N]) -> Self {
        Ranks::Threads(devices)
    }
}

impl<'a> From<&'a Communicator> for Ranks<'a> {
    fn from(communicator: &'a Communicator) -> Self {
        Ranks::Process(communicator)
    }
}

impl Ranks<'_> {
    /// The device of the first rank this process holds.
    fn first_device(&self) -> Option<&Device> {
        match self {
            Ranks::Threads(devices) => devices.first(),
            Ranks::Process(communicator) => Some(communicator.device()),
        }
    }
}

impl Model {
    /// Splits `config` over the ranks and builds the shard of each rank
    /// this process holds from the weights `weights(partition, device)`
    /// gives, threads' ranks in parallel.
    fn assemble(
        name: String,
        config: Config,
        ranks: Ranks<'_>,
        weights: impl Fn(&Partition, &Device) -> Result<Weights> + Sync,
    ) -> Result<Model> {
        let devices = match ranks {
            Ranks::Threads(devices) => devices,
            Ranks::Process(communicator) => {
                let partition = Partition::all(&config, communicator.ranks())?
                    .into_iter()
                    .nth(communicator.rank())
                    .ok_or_else(|| {
                        ModelError::InvalidInput(format!(
                            "rank {} is not in a group of {}",
                            communicator.rank(),
                            communicator.ranks()
                        ))
                    })?;
                let device = communicator.device();
                let shard_weights = weights(&partition, device)?;
                let shard = Shard::new(&config, partition, shard_weights, device, Some(communicator))?;
                return Ok(Model {
                    name,
                    format: None,
                    config,
                    shards: vec![shard],
                    communicators: vec![communicator.clone()],
                });
            }
        };
        if devices.is_empty() {
            return Err(ModelError::InvalidInput(
                "a model needs at least one device".into(),
            ));
        }
        let partitions = if devices.len() == 1 {
            vec![Partition::whole(&config)]
        } else {
            Partition::all(&config, devices.len())?
        };
        let communicators = if devices.len() == 1 {
            Vec::new()
        } else {
            Communicator::group(devices)?
        };
        let build = |partition: Partition, device: &Device| -> Result<Shard> {
            let weights = weights(&partition, device)?;
            let communicator = communicators.get(partition.rank);
            Shard::new(&config, partition, weights, device, communicator)
        };
        let shards = if devices.len() == 1 {
            vec![build(partitions.into_iter().next().expect("one"), &devices[0])?]
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = partitions
                    .into_iter()
                    .zip(devices)
                    .map(|(partition, device)| scope.spawn(|| build(partition, device)))
                    .collect();
                handles
                    .into_iter()
                    .map(|handle| {
                        handle
                            .join()
                            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                    })
                    .collect::<Result<Vec<Shard>>>()
            })?
        };
        Ok(Model {
            name,
            format: None,
            config,
            shards,
            communicators,
        })
    }

    /// Loads a Hugging Face model directory onto `device`.
    pub fn load(directory: &Path, device: &Device, options: LoadOptions) -> Result<Model> {
        Self::load_split(directory, std::slice::from_ref(device), options)
    }

    /// Loads a Hugging Face model directory split over `ranks` by tensor
    /// parallelism (one device: not split); each rank reads only its share.
    pub fn load_split<'a>(
        directory: &Path,
        ranks: impl Into<Ranks<'a>>,
        options: LoadOptions,
    ) -> Result<Model> {
        let config = Config::from_directory(directory)?;
        let name = directory.display().to_string();
        let quiet = options.quiet;
        Self::assemble(name, config.clone(), ranks.into(), |partition, device| {
            // One progress bar (rank 0's) for a split model.
            let options = LoadOptions {
                quiet: quiet || partition.rank > 0,
            };
            Weights::load(directory, &config, partition, device, options)
        })
    }

    /// Places the weights of the GGUF model `gguf` on `ranks`' devices, split
    /// over them by tensor parallelism where there are several (a quantized
    /// matrix's columns only on whole blocks: a split that cuts blocks is
    /// refused naming the tensor). The model's name carries the file's
    /// format mix and, where quantized weights were dequantized at load,
    /// says so. A quantized file's KV cache is bf16 on a GPU (see below);
    /// `set_kv_dtype` changes it.
    pub fn load_gguf<'a>(
        gguf: &GgufModel,
        ranks: impl Into<Ranks<'a>>,
        options: LoadOptions,
    ) -> Result<Model> {
        let ranks = ranks.into();
        let note = std::sync::Mutex::new(None);
        let quiet = options.quiet;
        let mut model = Self::assemble(String::new(), gguf.config.clone(), ranks, |partition, device| {
            // One progress bar (rank 0's) for a split model.
            let options = LoadOptions {
                quiet: quiet || partition.rank > 0,
            };
            let (weights, dequantized) = Weights::from_gguf(gguf, partition, device, options)?;
            *note.lock().expect("not poisoned") = dequantized;
            Ok(weights)
        })?;
        let note = note.into_inner().expect("not poisoned");
        model.format = Some(gguf.file_type_name());
        model.name = match note {
            Some(note) => format!("{} ({}; {note})", gguf.path().display(), gguf.format_mix()),
            None => format!("{} ({})", gguf.path().display(), gguf.format_mix()),
        };
        // Quantized weights leave the activations in f32 (the file's
        // vectors), which made the KV cache f32 and prefill attention the
        // scalar f32 kernel: on a GPU the cache is bf16 and prefill
        // attention runs on tensor cores, as llama.cpp keeps its cache in
        // f16 (llama-3.2-1b Q4_K_M pp512 33.0K -> 96.6K tok/s, tg128 1,262 ->
        // 1,246, one H200). The CPU keeps the f32 reference path.
        if gguf.holds_quantized_weights()
            && model.kv_dtype() == kernelscope::DType::F32
            && ranks
                .first_device()
                .is_some_and(|device| device.backend() != "cpu")
        {
            model.set_kv_dtype(kernelscope::DType::BF16)?;
        }
        Ok(model)
    }

    /// Builds preset `name` with seeded synthetic weights in memory.
    pub fn from_preset(name: &str, device: &Device, options: SyntheticOptions) -> Result<Model> {
        Self::from_preset_split(name, std::slice::from_ref(device), options)
    }

    /// Builds preset `name` with seeded synthetic weights, split over
    /// `ranks` by tensor parallelism; each rank makes only its share.
    pub fn from_preset_split<'a>(
        name: &str,
        ranks: impl Into<Ranks<'a>>,
        options: SyntheticOptions,
    ) -> Result<Model> {
        let config = preset(name)?;
        let SyntheticOptions { dtype, seed, quiet } = options;
        Self::assemble(
            format!("{name} (synthetic, seed {seed}, {dtype})"),
            config.clone(),
            ranks.into(),
            |partition, device| {
                let options = SyntheticOptions {
                    quiet: quiet || partition.rank > 0,
                    ..options
                };
                Weights::synthetic(&config, partition, device, options)
            },
        )
    }
}
