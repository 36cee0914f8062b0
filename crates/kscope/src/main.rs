//! `kscope`: kernelscope's command line. Each subcommand lives in its own
//! module; this file parses arguments and maps errors to exit codes
//! (0 success, 1 regression found by `compare`, 2 bad input or failure).

mod compare;
mod info;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Where every microsecond of every token goes.
#[derive(Parser, Debug)]
#[command(name = "kscope", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Compare two JSON profiles; exit 1 on a regression.
    Compare(compare::CompareArgs),
    /// Backends compiled in, devices found, their timing capabilities and bandwidth.
    Info(info::InfoArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Compare(args) => compare::run(args),
        Command::Info(args) => info::run(args),
    };
    match outcome {
        Ok(code) => code,
        Err(error) => {
            // One line: the chain of causes joined, never a backtrace.
            let message: Vec<String> = error.chain().map(|cause| cause.to_string()).collect();
            eprintln!("error: {}", message.join(": "));
            ExitCode::from(2)
        }
    }
}
