//! `kscope gen-model`: writes a synthetic model with deterministic seeded
//! weights for a preset shape: a Hugging Face checkpoint (a directory), or
//! a GGUF file (`--out F.gguf`) in any of the file types `--quant` names,
//! with a byte-level vocabulary so `--prompt` works on it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Args;
use kernelscope::DType;
use kernelscope_model::gguf_export::{GgufFileType, write_gguf};
use kernelscope_model::{ExpertLayout, SyntheticOptions, preset, synthetic};

use crate::model_args::{is_gguf_name, parse_weight_dtype};

/// Arguments of `kscope gen-model`.
#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)]
pub struct GenModelArgs {
    /// The preset shape (tiny, tiny-qwen2, tiny-qwen3, tiny-qwen3-moe, tiny-mixtral, tiny-llama3, tiny-256, qwen2.5-0.5b, llama-3.2-1b, llama-3-8b, qwen3-8b, qwen3-30b-a3b, llama-3.1-8b, tinyllama-1.1b, mixtral-8x7b, llama-3-70b).
    #[arg(long)]
    pub preset: String,
    /// Output directory (created if needed), or a GGUF file (a name ending
    /// in `.gguf`).
    #[arg(long, value_name = "DIR|FILE.gguf")]
    pub out: PathBuf,
    /// The GGUF file type (only with `--out FILE.gguf`): f32, f16, bf16,
    /// q8_0, q4_0, q4_k_m, q5_k_m, q6_k; each tensor takes the type
    /// llama-quantize gives it. Default: the `--dtype`.
    #[arg(long, value_name = "TYPE", value_parser = parse_file_type)]
    pub quant: Option<GgufFileType>,
    /// Seed of the weights.
    #[arg(long, default_value_t = 0, value_parser = crate::numbers::seed)]
    pub seed: u64,
    /// Weight dtype (of a checkpoint; of a GGUF file without `--quant`).
    #[arg(long, default_value = "bf16", value_parser = parse_weight_dtype)]
    pub dtype: DType,
    /// Overwrite the config.json and model.safetensors already in DIR (a
    /// sharded checkpoint there is never overwritten).
    #[arg(long)]
    pub force: bool,
    /// Multiply the token embedding and the LM head by S (GGUF output):
    /// the presets' embeddings are uniform on ±1, which puts a 1B's logits
    /// at a standard deviation near 26, so one token takes nearly all the
    /// probability and the KL divergence of a quantized file from its base
    /// (`kscope kl`, `llama-perplexity --kl-divergence`) reads 0; 0.1 gives
    /// logits near 2.6, as trained models have.
    #[arg(long, value_name = "S", default_value_t = 1.0, value_parser = parse_scale)]
    pub embedding_scale: f32,
    /// How a mixture-of-experts preset's experts are written: per-expert
    /// (one tensor per expert, as on the Hub and as transformers'
    /// save_pretrained writes them) or stacked (`mlp.experts.gate_up_proj`
    /// and `down_proj`, as transformers 5 holds them in memory).
    #[arg(long, value_name = "LAYOUT", default_value = "per-expert", value_parser = parse_expert_layout)]
    pub expert_layout: ExpertLayout,
    /// Write config.json only, no weights: for a reference framework to
    /// build the same shape with weights of its own (a benchmark of a model
    /// too large to write twice, as `hf_bench.py --random-weights`).
    #[arg(long)]
    pub config_only: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// An `--expert-layout` value.
fn parse_expert_layout(text: &str) -> Result<ExpertLayout, String> {
    match text {
        "per-expert" => Ok(ExpertLayout::PerExpert),
        "stacked" => Ok(ExpertLayout::Stacked),
        other => Err(format!(
            "`{other}` is not an expert layout (per-expert or stacked)"
        )),
    }
}

/// An `--embedding-scale` value: finite and above 0.
fn parse_scale(text: &str) -> Result<f32, String> {
    match text.parse::<f32>() {
        Ok(value) if value.is_finite() && value > 0.0 => Ok(value),
        _ => Err(format!("`{text}` is not a scale: give a finite number above 0")),
    }
}

/// Checks the whole target before anything is written: `out` is a folder
/// (or not there yet), the two files to write are plain files that may be
/// replaced (`--force`), and no sharded checkpoint would be left beside a
/// new config that does not describe it.
fn check_target(out: &Path, force: bool) -> Result<()> {
    let Ok(metadata) = std::fs::metadata(out) else {
        return Ok(());
    };
    if !metadata.is_dir() {
        bail!("--out {}: exists and is not a directory", out.display());
    }
    let index = out.join("model.safetensors.index.json");
    if std::fs::symlink_metadata(&index).is_ok() {
        bail!(
            "--out {}: holds a sharded checkpoint ({}); gen-model never overwrites one: choose an empty directory",
            out.display(),
            index.display()
        );
    }
    let mut existing = Vec::new();
    for name in ["config.json", "model.safetensors"] {
        let path = out.join(name);
        let Ok(metadata) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !metadata.is_file() {
            bail!(
                "{}: exists and is not a regular file; refusing to replace it",
                path.display()
            );
        }
        existing.push(name);
    }
    if !existing.is_empty() && !force {
        bail!(
            "--out {}: {} already there; pass --force to overwrite",
            out.display(),
            existing.join(" and ")
        );
    }
    Ok(())
}

/// A `--quant` value.
pub fn parse_file_type(text: &str) -> Result<GgufFileType, String> {
    GgufFileType::parse(text).ok_or_else(|| {
        format!(
            "`{text}` is not a GGUF file type: expected one of {}",
            GgufFileType::NAMES
        )
    })
}

/// The file type `--dtype` stands for.
fn file_type_of(dtype: DType) -> GgufFileType {
    match dtype {
        DType::F32 => GgufFileType::F32,
        DType::F16 => GgufFileType::F16,
        _ => GgufFileType::BF16,
    }
}

fn run_gguf(args: &GenModelArgs, config: &kernelscope_model::Config) -> Result<ExitCode> {
    let output = crate::output::OutputFile::check(&args.out, "--out", args.force, None)?;
    crate::gguf_output::remove_left_temporaries(output.path());
    crate::gguf_output::stop_on_signals();
    let file_type = args.quant.unwrap_or_else(|| file_type_of(args.dtype));
    let seed = args.seed;
    let name = format!("{} (synthetic, seed {seed})", args.preset);
    write_gguf(
        config,
        output.path(),
        file_type,
        &name,
        true,
        args.quiet,
        |tensor, shape| {
            let mut values = synthetic::tensor_values(tensor, shape, seed);
            // A bf16 or f16 file stands for a checkpoint of that dtype: its
            // vectors (norms), which GGUF keeps in F32, hold that dtype's
            // values, as a converter's do (and kscope then runs it in that
            // dtype rather than in f32).
            if shape.len() == 1 {
                match file_type {
                    GgufFileType::BF16 => synthetic::round_to(DType::BF16, &mut values),
                    GgufFileType::F16 => synthetic::round_to(DType::F16, &mut values),
                    _ => {}
                }
            }
            if matches!(tensor, "model.embed_tokens.weight" | "lm_head.weight") && args.embedding_scale != 1.0
            {
                values.iter_mut().for_each(|value| *value *= args.embedding_scale);
            }
            Ok(values)
        },
    )?;
    let bytes = std::fs::metadata(output.path()).map(|m| m.len()).unwrap_or(0);
    let summary = kernelscope_model::gguf_model::GgufModel::open(output.path())?.format_mix();
    println!(
        "wrote {}: GGUF {summary} ({:.1} MB, seed {seed}, fnv1a64 {:016x})",
        output.path().display(),
        bytes as f64 / 1e6,
        synthetic::file_digest(output.path())?
    );
    Ok(ExitCode::SUCCESS)
}

pub fn run(args: GenModelArgs) -> Result<ExitCode> {
    let config = preset(&args.preset)?;
    if is_gguf_name(&args.out) {
        return run_gguf(&args, &config);
    }
    if args.quant.is_some() {
        bail!("--quant writes GGUF files: give --out a name ending in .gguf");
    }
    if args.embedding_scale != 1.0 {
        bail!("--embedding-scale applies to GGUF files: give --out a name ending in .gguf");
    }
    check_target(&args.out, args.force)?;
    if args.config_only {
        std::fs::create_dir_all(&args.out)?;
        let path = args.out.join("config.json");
        std::fs::write(&path, config.to_json(synthetic::torch_dtype(args.dtype)))?;
        println!("wrote {} ({} config, no weights)", path.display(), args.preset);
        return Ok(ExitCode::SUCCESS);
    }
    let weights = args.out.join("model.safetensors");
    let options = SyntheticOptions {
        dtype: args.dtype,
        seed: args.seed,
        quiet: args.quiet,
    };
    synthetic::write_checkpoint_in(&config, &args.out, options, args.expert_layout)?;
    let bytes = std::fs::metadata(&weights).map(|m| m.len()).unwrap_or(0);
    println!(
        "wrote {}: config.json + model.safetensors ({} tensors, {:.1} MB, {} weights, seed {}, fnv1a64 {:016x})",
        args.out.display(),
        config.tensor_shapes().len(),
        bytes as f64 / 1e6,
        args.dtype,
        args.seed,
        synthetic::file_digest(&weights)?
    );
    Ok(ExitCode::SUCCESS)
}
