//! `kscope quantize`: turns a Hugging Face checkpoint (config.json and
//! safetensors) into a GGUF file, as llama.cpp's converter and
//! `llama-quantize` would (Q/K rows interleaved, each tensor in the type
//! the file type gives it, llama.cpp's reference quantizers).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Args;
use kernelscope_model::gguf_export::{GgufFileType, quantize_checkpoint};
use kernelscope_model::gguf_model::GgufModel;

use crate::gen_model::parse_file_type;
use crate::model_args::is_gguf_name;

/// Arguments of `kscope quantize`.
#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The Hugging Face model directory to convert.
    #[arg(value_name = "DIR")]
    pub directory: PathBuf,
    /// The GGUF file to write (a name ending in .gguf).
    #[arg(long, value_name = "FILE.gguf")]
    pub out: PathBuf,
    /// The file type: f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m, q6_k.
    #[arg(long, value_name = "TYPE", value_parser = parse_file_type)]
    pub quant: GgufFileType,
    /// Replace an existing file at --out.
    #[arg(long)]
    pub force: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

pub fn run(args: QuantizeArgs) -> Result<ExitCode> {
    if !args.directory.is_dir() {
        bail!(
            "{}: not a directory (expected a Hugging Face model directory)",
            args.directory.display()
        );
    }
    if !is_gguf_name(&args.out) {
        bail!(
            "--out {}: expected a file name ending in .gguf",
            args.out.display()
        );
    }
    let output = crate::output::OutputFile::check(&args.out, "--out", args.force, Some(&args.directory))?;
    crate::gguf_output::remove_left_temporaries(output.path());
    crate::gguf_output::stop_on_signals();
    let notes = quantize_checkpoint(&args.directory, output.path(), args.quant, args.quiet)?;
    for note in notes {
        println!("note: {note}");
    }
    let bytes = std::fs::metadata(output.path()).map(|m| m.len()).unwrap_or(0);
    let summary = GgufModel::open(output.path())?.format_mix();
    println!(
        "wrote {}: GGUF {summary} ({:.1} MB) from {}",
        output.path().display(),
        bytes as f64 / 1e6,
        args.directory.display()
    );
    Ok(ExitCode::SUCCESS)
}
