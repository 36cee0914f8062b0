//! `kscope`: kernelscope's command line. Each subcommand lives in its own
//! module; this file parses arguments and maps errors to exit codes
//! (0 success, 1 regression found by `compare`, 2 bad input or failure).

mod bench;
mod calibrate;
mod ceilings;
mod chat_render;
mod compare;
mod errors;
mod gen_model;
mod gguf_output;
mod info;
mod kl;
mod model_args;
mod model_errors;
mod model_shape;
mod numbers;
mod output;
mod profile_program;
mod prompt;
mod quantize;
mod report;
mod run;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Where every microsecond of every token goes.
#[derive(Parser, Debug)]
#[command(name = "kscope", version, about, long_about = None, arg_required_else_help = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate tokens with a model; --profile shows where every microsecond went.
    Run(run::RunArgs),
    /// Profile any CUDA program (PyTorch, llama.cpp, vLLM): `kscope profile -- CMD ARGS...`; the same report, JSON, HTML and trace as `run --profile`, a decoder's layers and roles found from its kernels (--model for bytes and flops).
    Profile(profile_program::ProfileArgs),
    /// Prompt-processing and generation tokens/s (mean ± stddev) against the bandwidth roofline, and the peak compute rate.
    Bench(bench::BenchArgs),
    /// The report of a saved JSON profile: text, an HTML page (--html), a Chrome trace (--trace).
    Report(report::ReportArgs),
    /// Compare two JSON profiles: two engines (kscope against llama.cpp or PyTorch) as a gap account by role and layer; two runs of one program also by op and layer, exit 1 on a regression.
    Compare(compare::CompareArgs),
    /// Write a synthetic model with seeded weights for a preset shape: a Hugging Face checkpoint, or a GGUF file (--out F.gguf --quant TYPE).
    GenModel(gen_model::GenModelArgs),
    /// KL divergence of a model's next-token distributions from a reference's (the same weights unquantized) over one fixed token sequence, as llama-perplexity --kl-divergence.
    Kl(kl::KlArgs),
    /// Convert a Hugging Face checkpoint into a GGUF file (f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m, q6_k), as llama.cpp would.
    Quantize(quantize::QuantizeArgs),
    /// Check per-dispatch times against kernels of known duration (1–100 µs, eager and in a graph).
    Calibrate(calibrate::CalibrateArgs),
    /// Backends compiled in, devices found, their timing capabilities, bandwidth and peak compute.
    Info(info::InfoArgs),
}

/// clap's message for a usage error, kept with its hint and usage line
/// (what names the missing argument or says how to pass a value), without
/// blank lines and the closing "For more information, try '--help'".
fn usage_error(rendered: &str) -> String {
    rendered
        .lines()
        .map(str::trim_end)
        .filter(|line| !line.is_empty() && !line.starts_with("For more information"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn main() -> ExitCode {
    // Rust ignores SIGPIPE, so printing into a closed pipe (`kscope compare
    // a b | head -1`) panicked; the default makes kscope end like any
    // command-line tool whose reader went away.
    #[cfg(unix)]
    // SAFETY: called first thing, before any thread exists; SIG_DFL is a
    // valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    if std::env::args_os()
        .nth(1)
        .is_some_and(|first| first == chat_render::CHILD_ARGUMENT)
    {
        return chat_render::serve_child();
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) if !error.use_stderr() => {
            // --help and --version: clap prints them in full.
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        Err(error) if error.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // `kscope` alone: the help, on stderr, as a usage error.
            let _ = error.print();
            return ExitCode::from(2);
        }
        Err(error) => {
            eprintln!("{}", usage_error(&error.render().to_string()));
            return ExitCode::from(2);
        }
    };
    let outcome = match cli.command {
        Command::Kl(_) if let Err(error) = refuse_launched_ranks() => Err(error),
        Command::Run(args) => run::run(args),
        Command::Profile(args) => profile_program::run(args),
        Command::Calibrate(args) => calibrate::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Report(args) => report::run(args),
        Command::Compare(args) => compare::run(args),
        Command::GenModel(args) => gen_model::run(args),
        Command::Quantize(args) => quantize::run(args),
        Command::Kl(args) => kl::run(args),
        Command::Info(args) => info::run(args),
    };
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {}", errors::one_line(&error));
            // Stopped by a signal: the shell's code for SIGINT.
            match error.downcast_ref::<kernelscope_model::ModelError>() {
                Some(kernelscope_model::ModelError::Interrupted { .. }) => ExitCode::from(130),
                _ => ExitCode::from(2),
            }
        }
    }
}

/// Refuses `kl` started by a launcher as one of several ranks: it compares
/// two models in one process and does not join a group (run and bench do),
/// so each process would run both models alone.
fn refuse_launched_ranks() -> anyhow::Result<()> {
    let group = kernelscope::runtime::LaunchedRank::group_of(|name| std::env::var(name).ok());
    if let Some((launcher, rank, world_size)) = group.filter(|&(_, _, world_size)| world_size > 1) {
        anyhow::bail!(
            "started by {} as rank {rank} of {world_size}: kl runs in one process and does not join a group of ranks (run and bench do); run one process with --tp {world_size} instead",
            launcher.name()
        );
    }
    Ok(())
}
