//! Where a command's ranks run: the devices of `--device`, `--devices` and
//! `--tp` in this process, or, started by a launcher as one of several
//! ranks, this process's own device and what it tells the other ranks it
//! runs.

use anyhow::{Context, Result, bail};
use kernelscope::runtime::LaunchedRank;
use kernelscope::{Device, DeviceOptions};

use super::{CpuKernels, ModelArgs, ModelLocation};

impl ModelArgs {
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
        if let CpuKernels::Forced(path) = self.cpu_kernels {
            kernelscope::cpu_simd::dot::force_dot_path(path).context("--cpu-kernels")?;
        }
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

    /// The device of one rank of a launcher's group: `--device` as given,
    /// where `cuda` (and `auto` on a host with a GPU) means the GPU of the
    /// launcher's local rank, or the one GPU a task sees where the launcher
    /// gave each task its own (`CUDA_VISIBLE_DEVICES`, srun's `--gpu-bind`).
    /// No other GPU is opened: each process holds only its own.
    pub(super) fn open_rank_device(
        &self,
        place: &LaunchedRank,
        options: DeviceOptions,
    ) -> Result<(Device, String)> {
        let spec = self.device.trim();
        let gpus = Device::cuda_device_count().unwrap_or(0);
        if !(spec == "cuda" || (spec == "auto" && gpus > 0)) {
            return Ok(Device::open(spec, options)?);
        }
        let ordinal = match (place.local_rank < gpus, gpus) {
            (true, _) => place.local_rank,
            (false, 1) => 0,
            (false, _) => bail!(
                "rank {} of {} has local rank {} but this host shows {gpus} GPU(s): give each rank a GPU of its own (more GPUs, fewer ranks a host, or CUDA_VISIBLE_DEVICES naming one GPU a rank)",
                place.rank,
                place.launcher.name(),
                place.local_rank
            ),
        };
        let device = Device::cuda_with(ordinal, options).with_context(|| {
            format!(
                "rank {} (local rank {}) of {} drives GPU cuda:{ordinal}",
                place.rank,
                place.local_rank,
                place.launcher.name()
            )
        })?;
        Ok((
            device,
            format!("local rank {} of {}", place.local_rank, place.launcher.name()),
        ))
    }

    /// What this rank runs, as every rank of a group must run the same: the
    /// model's shape and a hash of its source (a file's length and first
    /// MiB, which hold its metadata and tensor table; a directory's
    /// config.json and its weight files' lengths; a preset's name, dtype
    /// and seed), the device's backend and a hash of the command's
    /// arguments, so ranks started on different files, backends or
    /// requests are refused.
    pub(super) fn description(
        &self,
        location: Option<&ModelLocation>,
        config: &kernelscope_model::Config,
        device: &Device,
    ) -> Result<String> {
        use std::io::Read;
        // The request too: ranks that differ in prompt, sampling or any
        // flag would issue different collectives and wait on each other.
        let mut arguments = kernelscope::hash::Fnv1a64::new();
        for argument in std::env::args_os().skip(1) {
            arguments.update(argument.as_encoded_bytes());
            arguments.update(&[0]);
        }
        let mut hash = kernelscope::hash::Fnv1a64::new();
        hash.update(format!("{config:?}").as_bytes());
        let source = match location {
            Some(ModelLocation { gguf: Some(path), .. }) => {
                let file = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
                let length = file
                    .metadata()
                    .with_context(|| format!("{}", path.display()))?
                    .len();
                let mut head = Vec::new();
                file.take(1 << 20)
                    .read_to_end(&mut head)
                    .with_context(|| format!("{}", path.display()))?;
                hash.update(&length.to_le_bytes());
                hash.update(&head);
                "a GGUF file"
            }
            Some(location) => {
                let directory = &location.directory;
                let config_path = directory.join("config.json");
                hash.update(
                    &std::fs::read(&config_path).with_context(|| format!("{}", config_path.display()))?,
                );
                let mut files: Vec<(String, u64)> = std::fs::read_dir(directory)
                    .with_context(|| format!("{}", directory.display()))?
                    .filter_map(|entry| entry.ok())
                    .filter(|entry| entry.file_name().to_string_lossy().ends_with(".safetensors"))
                    .filter_map(|entry| {
                        Some((
                            entry.file_name().to_string_lossy().into_owned(),
                            entry.metadata().ok()?.len(),
                        ))
                    })
                    .collect();
                files.sort();
                for (name, length) in files {
                    hash.update(name.as_bytes());
                    hash.update(&length.to_le_bytes());
                }
                "a checkpoint"
            }
            None => {
                let name = self.preset.as_deref().unwrap_or("tiny");
                hash.update(format!("{name} {:?} {}", self.dtype, self.weights_seed).as_bytes());
                "a preset"
            }
        };
        Ok(format!(
            "{source} of hash {:016x} on {} with arguments of hash {:016x}",
            hash.finish(),
            device.backend(),
            arguments.finish()
        ))
    }
}
