//! `kscope gen-model`: writes a synthetic Hugging Face checkpoint with
//! deterministic seeded weights for a preset shape.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Args;
use kernelscope::DType;
use kernelscope_model::{preset, synthetic};

use crate::model_args::parse_weight_dtype;

/// Arguments of `kscope gen-model`.
#[derive(Args, Debug)]
pub struct GenModelArgs {
    /// The preset shape (tiny, tiny-qwen2, tiny-llama3, qwen2.5-0.5b, llama-3.2-1b, llama-3-8b, tinyllama-1.1b).
    #[arg(long)]
    pub preset: String,
    /// Output directory (created if needed).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Seed of the weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Weight dtype.
    #[arg(long, default_value = "bf16", value_parser = parse_weight_dtype)]
    pub dtype: DType,
    /// Overwrite a checkpoint already in DIR.
    #[arg(long)]
    pub force: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

pub fn run(args: GenModelArgs) -> Result<ExitCode> {
    let config = preset(&args.preset)?;
    let weights = args.out.join("model.safetensors");
    if weights.exists() && !args.force {
        bail!(
            "{}: a checkpoint is already there; pass --force to overwrite it",
            weights.display()
        );
    }
    synthetic::write_checkpoint(&config, args.dtype, args.seed, &args.out, args.quiet)?;
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
