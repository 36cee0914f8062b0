//! The arguments every model-running subcommand shares: which model, which
//! device, and how to open them.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use kernelscope::probes::MAX_COMPUTE_PROBE_SIZE;
use kernelscope::runtime::LaunchedRank;
use kernelscope::{Communicator, DType, Device, DeviceOptions};
use kernelscope_model::gguf_model::GgufModel;
mod devices;

use kernelscope_model::{
    DEFAULT_PREFILL_CHUNK, LoadOptions, Model, Ranks, SyntheticOptions, Tokenizer, looks_like_repo_id,
    resolve_hub_model,
};

/// Which model and device.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// A GGUF model file (llama.cpp's format; the first part of a split
    /// one), the same as --model FILE.gguf.
    #[arg(value_name = "MODEL.gguf", conflicts_with_all = ["model", "preset"])]
    pub file: Option<PathBuf>,
    /// A Hugging Face model directory (config.json, *.safetensors, optional
    /// tokenizer.json), a GGUF file, or ORG/NAME of a model in the Hugging
    /// Face cache (HF_HUB_CACHE, HF_HOME or ~/.cache/huggingface/hub; never
    /// downloads).
    #[arg(long, value_name = "DIR|FILE.gguf|ORG/NAME", conflicts_with = "preset")]
    pub model: Option<PathBuf>,
    /// The GGUF file of an ORG/NAME model in the cache (default: its one
    /// GGUF file, if it has exactly one and no safetensors checkpoint).
    #[arg(long, value_name = "NAME.gguf", requires = "model")]
    pub gguf: Option<String>,
    /// The revision of an ORG/NAME model: a branch, tag or commit in the cache (default main).
    #[arg(long, value_name = "REV", requires = "model")]
    pub revision: Option<String>,
    /// A synthetic preset generated in memory (tiny, tiny-qwen2, tiny-qwen3, tiny-llama3, tiny-256,
    /// qwen2.5-0.5b, llama-3.2-1b, llama-3-8b, qwen3-8b, llama-3.1-8b, tinyllama-1.1b, llama-3-70b).
    /// Default: tiny.
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
    /// Started by a launcher (torchrun, mpirun, srun) as one of several
    /// ranks: how long to wait, in seconds, for every rank to meet at
    /// MASTER_ADDR:MASTER_PORT before failing, naming those that never came.
    #[arg(long, default_value_t = 300, value_name = "SECONDS", value_parser = crate::numbers::positive_count)]
    pub rendezvous_timeout: usize,
    /// The CPU's mat-vec kernels: auto (the widest instructions the CPU
    /// has; bf16 mat-vecs in exact f32 products), avx512-bf16-exact (the
    /// same where the CPU has AVX-512 BF16: exact mat-vecs, vdpbf16ps
    /// prefill GEMM), avx512-bf16 (a rounding: x split into two bf16 parts
    /// for vdpbf16ps mat-vecs, 16 bits of x; logits within 0.24, mean
    /// 0.026, of the exact path on the 1B), avx2 (weights widened to f32)
    /// or portable. Quantized weights' 8-bit integer
    /// products follow: AVX-512 VNNI for Q8_0 and Q4_K on the AVX-512 paths, AVX2 on
    /// avx2, portable on portable. The profile names the ones used.
    #[arg(long, default_value = "auto", value_name = "SET", value_parser = parse_cpu_kernels)]
    pub cpu_kernels: CpuKernels,
    /// No progress bar while loading.
    #[arg(long)]
    pub quiet: bool,
    /// Prompt positions per forward pass: 1 runs a prompt position by
    /// position (as decode runs); larger values run chunks of that many as
    /// one pass, each projection one GEMM over the chunk.
    #[arg(long, default_value_t = DEFAULT_PREFILL_CHUNK, value_name = "N", value_parser = crate::numbers::positive_count)]
    pub prefill_chunk: usize,
    /// Element type of the KV cache (bf16, f16, f32). Default: the weights'
    /// dtype (bf16 for a quantized GGUF file on a GPU); f32 is the
    /// reference path.
    #[arg(long, value_name = "DTYPE", value_parser = parse_weight_dtype)]
    pub kv_dtype: Option<DType>,
}

/// The GGUF file of a cached repository: the one `--gguf` names (inside
/// the repository's cache folder), or its only `.gguf` file when it has no
/// `config.json`; several without `--gguf` are refused, listed.
fn pick_gguf(snapshot: &Path, repo_root: &Path, wanted: Option<&str>, repo: &str) -> Result<Option<PathBuf>> {
    if let Some(name) = wanted {
        let relative = Path::new(name);
        if relative.is_absolute()
            || relative
                .components()
                .any(|component| !matches!(component, std::path::Component::Normal(_)))
        {
            bail!("--gguf {name}: expected a file name inside the repository");
        }
        let path = snapshot.join(relative);
        let inside = path
            .canonicalize()
            .ok()
            .zip(repo_root.canonicalize().ok())
            .is_some_and(|(file, root)| file.starts_with(root));
        if !path.is_file() || !inside {
            bail!("--gguf {name}: no such file in {repo} ({})", snapshot.display());
        }
        return Ok(Some(path));
    }
    if snapshot.join("config.json").exists() {
        return Ok(None);
    }
    let mut found: Vec<String> = std::fs::read_dir(snapshot)
        .with_context(|| format!("{}: cannot list the snapshot", snapshot.display()))?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| is_gguf_name(Path::new(name)))
        .collect();
    found.sort();
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(snapshot.join(one))),
        several => bail!(
            "{repo} holds {} GGUF files ({}); pick one with --gguf NAME.gguf",
            several.len(),
            several.join(", ")
        ),
    }
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

/// A GGUF file's chat template.
pub struct GgufChat {
    /// `tokenizer.chat_template`.
    pub source: String,
    /// The file, for errors.
    pub path: PathBuf,
    /// The BOS and EOS tokens' text.
    pub bos: Option<String>,
    pub eos: Option<String>,
}

/// An opened model with its device.
pub struct Opened {
    /// The chat template a GGUF file carries, with its BOS and EOS tokens
    /// (compiled only when --chat asks for it).
    pub gguf_chat: Option<GgufChat>,
    /// Rank 0's device (the only one unless split; `model.devices()` has all).
    pub device: Device,
    pub device_reason: String,
    pub model: Model,
    pub tokenizer: Option<Tokenizer>,
    /// Why the model's vocabulary gave no tokenizer, where it has one that
    /// cannot tokenize: said only where text is encoded or decoded, so
    /// `--token-ids`, `bench` and `kl` run such a model.
    pub tokenizer_problem: Option<String>,
    /// The model directory, for a model read from files.
    pub directory: Option<PathBuf>,
}

/// Where a model's files are.
pub struct ModelLocation {
    /// The directory the model is read from (a GGUF file's folder).
    pub directory: PathBuf,
    /// What no output may overwrite: the model directory (for a Hugging
    /// Face cache snapshot the repository's cache folder), or a GGUF file.
    pub protected: PathBuf,
    /// The GGUF file, when the model is one.
    pub gguf: Option<PathBuf>,
}

/// Whether `path` names a GGUF file.
pub fn is_gguf_name(path: &Path) -> bool {
    path.extension()
        .is_some_and(|extension| extension.eq_ignore_ascii_case("gguf"))
}

/// Whether `path` is a GGUF file: named `.gguf`, or starting with the magic.
fn is_gguf_file(path: &Path) -> bool {
    if is_gguf_name(path) {
        return true;
    }
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut magic))
        .is_ok_and(|()| &magic == b"GGUF")
}

impl ModelArgs {
    /// Where the model is: `--model` (or the positional file) as given, or
    /// ORG/NAME resolved in the Hugging Face cache. `None` for a preset.
    pub fn location(&self) -> Result<Option<ModelLocation>> {
        let Some(model) = self.file.as_ref().or(self.model.as_ref()) else {
            if self.revision.is_some() {
                bail!("--revision applies to --model ORG/NAME");
            }
            return Ok(None);
        };
        if std::fs::symlink_metadata(model).is_ok() {
            if self.revision.is_some() {
                bail!("--revision applies to --model ORG/NAME, not to a path");
            }
            if self.gguf.is_some() {
                bail!(
                    "--gguf picks a file of an ORG/NAME model in the cache; give the file itself as --model"
                );
            }
            if !model.is_dir() {
                if model.is_file() && is_gguf_file(model) {
                    let folder = model.parent().filter(|parent| !parent.as_os_str().is_empty());
                    return Ok(Some(ModelLocation {
                        directory: folder.map_or_else(|| PathBuf::from("."), Path::to_path_buf),
                        protected: model.clone(),
                        gguf: Some(model.clone()),
                    }));
                }
                bail!(
                    "{}: not a directory or a GGUF file (expected a Hugging Face model directory or FILE.gguf)",
                    model.display()
                );
            }
            return Ok(Some(ModelLocation {
                directory: model.clone(),
                protected: model.clone(),
                gguf: None,
            }));
        }
        let text = model.to_string_lossy();
        if self.file.is_some() || !looks_like_repo_id(&text) {
            bail!(
                "{}: no such file or directory (expected a Hugging Face model directory, FILE.gguf or ORG/NAME)",
                model.display()
            );
        }
        // ORG/NAME is also a relative path: one not found is both a missing
        // local folder and a repository not in the cache, and says both.
        let snapshot = resolve_hub_model(&text, self.revision.as_deref()).map_err(|error| {
            anyhow::anyhow!(
                "{}: no such local file or directory, and as a Hugging Face repository: {}",
                model.display(),
                crate::model_errors::model_error_message(&error)
            )
        })?;
        let gguf = pick_gguf(
            &snapshot.directory,
            &snapshot.repo_root,
            self.gguf.as_deref(),
            &text,
        )?;
        Ok(Some(ModelLocation {
            directory: snapshot.directory,
            protected: snapshot.repo_root,
            gguf,
        }))
    }

    /// Opens the devices with `options`, then loads or generates the model
    /// (split over them with more than one).
    pub fn open(&self, options: DeviceOptions) -> Result<Opened> {
        let location = self.location()?;
        // A launcher's group of more than one (a stray RANK, or a group of
        // one, runs as before); then its variables read strictly.
        let launched = if launched_rank().is_some() {
            LaunchedRank::from_environment()?
        } else {
            None
        };
        if let Some(place) = &launched
            && (self.tp > 1 || self.devices.is_some())
        {
            bail!(
                "started by {} as rank {} of {}: each process is one rank, so leave out --tp and --devices (the launcher's group size splits the model)",
                place.launcher.name(),
                place.rank,
                place.world_size
            );
        }
        let split = launched.as_ref().map_or(self.tp, |place| place.world_size);
        let config = if split > 1 {
            // A split the model cannot take is said before any device opens.
            let config = match &location {
                Some(ModelLocation { gguf: Some(path), .. }) => GgufModel::open(path)?.config,
                Some(location) => kernelscope_model::Config::from_directory(&location.directory)?,
                None => kernelscope_model::preset(self.preset.as_deref().unwrap_or("tiny"))?,
            };
            if let (Some(place), Err(error)) = (&launched, kernelscope_model::Partition::all(&config, split))
            {
                // The library's words (ranks), not --tp's: the launcher set the split.
                bail!(
                    "started by {} as rank {} of {}: {error}",
                    place.launcher.name(),
                    place.rank,
                    place.world_size
                );
            }
            kernelscope_model::Partition::all(&config, split)?;
            Some(config)
        } else {
            None
        };
        let (devices, device_reason, communicator) = match (&launched, config) {
            (Some(place), Some(config)) => {
                let (device, reason) = self.open_rank_device(place, options)?;
                let description = self.description(location.as_ref(), &config, &device)?;
                let timeout = std::time::Duration::from_secs(self.rendezvous_timeout as u64);
                let communicator = Communicator::join(&device, place, &description, timeout)?;
                (vec![device], reason, Some(communicator))
            }
            _ => {
                let (devices, reason) = self.open_devices(options)?;
                (devices, reason, None)
            }
        };
        let ranks = match &communicator {
            Some(communicator) => Ranks::Process(communicator),
            None => Ranks::Threads(&devices),
        };
        let device = devices[0].clone();
        let mut gguf_chat = None;
        let (model, tokenizer) = match &location {
            Some(ModelLocation { gguf: Some(path), .. }) => {
                let gguf = GgufModel::open(path)?;
                let model = Model::load_gguf(&gguf, ranks, LoadOptions { quiet: self.quiet })?;
                let tokenizer = gguf.tokenizer();
                let lossy = gguf.file.metadata().lossy_strings();
                if let Some(first) = lossy.first() {
                    eprintln!(
                        "warning: {}: {} metadata strings are not UTF-8 and are read with U+FFFD for their invalid bytes, as llama.cpp loads them (the first: {first})",
                        path.display(),
                        lossy.len()
                    );
                }
                if let (Ok(Some(_)), Some(vocabulary)) = (&tokenizer, &gguf.vocabulary) {
                    let unusable = vocabulary.unusable_merges();
                    if let Some(first) = unusable.first() {
                        eprintln!(
                            "warning: {}: {} of tokenizer.ggml.merges name or make a token the vocabulary does not hold (the first {first:?}); left out, as llama.cpp never applies them",
                            path.display(),
                            unusable.len()
                        );
                    }
                }
                if let Some(source) = &gguf.chat_template {
                    let token = |id: Option<u32>| {
                        let vocabulary = gguf.vocabulary.as_ref()?;
                        vocabulary.tokens.get(id? as usize).cloned()
                    };
                    let vocabulary = gguf.vocabulary.as_ref();
                    gguf_chat = Some(GgufChat {
                        source: source.clone(),
                        path: path.clone(),
                        bos: token(vocabulary.and_then(|vocabulary| vocabulary.bos)),
                        eos: token(vocabulary.and_then(|vocabulary| vocabulary.eos)),
                    });
                }
                (model, tokenizer)
            }
            Some(location) => {
                let directory = &location.directory;
                let model = Model::load_split(directory, ranks, LoadOptions { quiet: self.quiet })?;
                for note in kernelscope_model::checkpoint_notes(directory, model.config())? {
                    eprintln!("warning: {note}");
                }
                (model, Tokenizer::from_directory(directory))
            }
            None => {
                let name = self.preset.as_deref().unwrap_or("tiny");
                let options = SyntheticOptions {
                    dtype: self.dtype,
                    seed: self.weights_seed,
                    quiet: self.quiet,
                };
                let model = Model::from_preset_split(name, ranks, options)
                    .with_context(|| format!("building preset {name}"))?;
                (model, Ok(None))
            }
        };
        let (tokenizer, tokenizer_problem) = match tokenizer {
            Ok(tokenizer) => (tokenizer, None),
            Err(error) => (None, Some(crate::model_errors::model_error_message(&error))),
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
            tokenizer_problem,
            gguf_chat,
            directory: location
                .filter(|location| location.gguf.is_none())
                .map(|location| location.directory),
        })
    }
}

/// This process's rank where a launcher started it as one of several
/// (its variables read as numbers; whether they are whole is said when the
/// model opens).
pub fn launched_rank() -> Option<usize> {
    LaunchedRank::group_of(|name| std::env::var(name).ok())
        .filter(|&(_, _, world_size)| world_size > 1)
        .map(|(_, rank, _)| rank)
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
        Some((library, link)) if let Some(rank) = model.process_rank() => format!(
            ", rank {rank} of {} ranks, one a process ({}; {library}, {link})",
            model.ranks(),
            model.devices()[0].name()
        ),
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
        model.weight_format()
    )
}

/// `--cpu-kernels`: the widest path the CPU has, or one forced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuKernels {
    /// The widest instructions the CPU has.
    Auto,
    /// This path, refused where the CPU lacks it.
    Forced(kernelscope::cpu_simd::dot::DotPath),
}

fn parse_cpu_kernels(text: &str) -> std::result::Result<CpuKernels, String> {
    use kernelscope::cpu_simd::dot::DotPath;
    Ok(match text {
        "auto" => CpuKernels::Auto,
        "avx512-bf16" => CpuKernels::Forced(DotPath::Avx512Bf16),
        "avx512-bf16-exact" => CpuKernels::Forced(DotPath::Avx512Bf16Exact),
        "avx2" => CpuKernels::Forced(DotPath::Avx2Fma),
        "portable" => CpuKernels::Forced(DotPath::Portable),
        other => {
            return Err(format!(
                "`{other}`: expected auto, avx512-bf16, avx512-bf16-exact, avx2 or portable"
            ));
        }
    })
}
