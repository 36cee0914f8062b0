//! `kscope bench`: prompt-processing and generation throughput in the manner
//! of llama-bench (mean ± stddev over repetitions, markdown or JSON), next to
//! the memory-bandwidth roofline of decoding on this device and its peak
//! compute rate (the GEMM probe).

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Result, bail};
use clap::{Args, ValueEnum};
use kernelscope::DeviceOptions;
use kernelscope::profile::{Phase, ProfileLevel, Spread};
use kernelscope::rng::SplitMix64;
use kernelscope_model::{ExecutionMode, Model};
use serde_json::json;

use crate::model_args::{ModelArgs, peak_bandwidth, peak_compute};
use crate::numbers;

/// Output format.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Output {
    /// A markdown table.
    Md,
    /// A JSON array.
    Json,
}

/// The most repetitions `-r` takes: each one runs the whole test.
const MAX_REPETITIONS: usize = 10_000;

/// The largest bandwidth probe (`--bandwidth-mib`): two buffers this size.
const MAX_BANDWIDTH_MIB: usize = 16_384;

/// Arguments of `kscope bench`.
#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt tokens processed per repetition (0 skips the test).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 128, value_parser = numbers::count)]
    pub prompt_tokens: usize,
    /// Tokens generated per repetition (0 skips the test).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128, value_parser = numbers::count)]
    pub generated_tokens: usize,
    /// Depth: positions already in the KV cache when each test starts (as
    /// llama-bench's -d). A random prompt of this length is prefilled once
    /// (not timed); pp and tg then run from that position.
    #[arg(short = 'd', long = "n-depth", default_value_t = 0, value_parser = numbers::count)]
    pub depth: usize,
    /// Repetitions (after one warm-up that is not counted), 1 to 10000.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5, value_parser = numbers::count)]
    pub repetitions: usize,
    /// Output format.
    #[arg(long, value_enum, default_value = "md")]
    pub output: Output,
    /// Seed of the random prompt.
    #[arg(long, default_value_t = 0, value_parser = numbers::seed)]
    pub seed: u64,
    /// Profiling level while measuring (off, submission, dispatch): runs the
    /// same bench with the profiler on, to measure its overhead.
    #[arg(long, default_value = "off")]
    pub profile: ProfileLevel,
    /// Launch dispatch by dispatch instead of one graph per token (CUDA).
    #[arg(long)]
    pub eager: bool,
    /// Run decode with one dispatch per op instead of the fused kernels
    /// (RMSNorm + mat-vec, RoPE + KV append, mat-vec + residual add): the
    /// reference path, for checking and for `kscope compare`.
    #[arg(long)]
    pub unfused: bool,
    /// Let CUDA graphs launch each kernel early, under the previous
    /// kernel's tail (programmatic dependent launch; GPUs of compute
    /// capability 9.0 and later); by default each starts after the previous
    /// one has finished.
    #[arg(long)]
    pub early_launch: bool,
    /// Size of the bandwidth probe in MiB, up to 16384 (0 skips the roofline).
    #[arg(long, default_value_t = 256, value_parser = numbers::count)]
    pub bandwidth_mib: usize,
    /// Side of the square bf16 GEMM that measures the device's peak compute
    /// rate, up to 16384 (default 8192 on a GPU, 512 on the CPU; 0 skips it).
    #[arg(long, value_name = "N", value_parser = crate::model_args::compute_size)]
    pub compute_size: Option<usize>,
}

/// Seconds to run `tokens` as `phase` from position `depth`: a prompt
/// (batched prefill, in the model's chunks) or greedy decode feeding back
/// its own choices (in graph mode the next step is queued before the last
/// one's token is read back).
fn timed_run(model: &mut Model, tokens: &[u32], depth: usize, phase: Phase) -> Result<f64> {
    let start = Instant::now();
    match phase {
        Phase::Decode => model.decode_greedy(tokens[0], depth, tokens.len(), |_| true)?,
        Phase::Prefill => {
            model.prefill(tokens, depth)?;
        }
    }
    Ok(start.elapsed().as_secs_f64())
}

pub fn run(args: BenchArgs) -> Result<ExitCode> {
    if !(1..=MAX_REPETITIONS).contains(&args.repetitions) {
        bail!(
            "-r {}: repetitions must be in 1..={MAX_REPETITIONS}",
            args.repetitions
        );
    }
    if args.bandwidth_mib > MAX_BANDWIDTH_MIB {
        bail!(
            "--bandwidth-mib {}: the probe is at most {MAX_BANDWIDTH_MIB} MiB",
            args.bandwidth_mib
        );
    }
    if args.prompt_tokens == 0 && args.generated_tokens == 0 {
        bail!("nothing to measure: -p and -n are both 0");
    }
    // Measured first, on an unprofiled handle, so neither the model nor
    // CUPTI (at --profile dispatch) is in the way.
    let bandwidth = if args.bandwidth_mib > 0 {
        Some(peak_bandwidth(args.model.first_device(), args.bandwidth_mib)?)
    } else {
        None
    };
    let compute = peak_compute(args.model.first_device(), args.compute_size)?;
    let mut options = DeviceOptions::new().profile(args.profile);
    if args.early_launch {
        options = options.early_launch();
    }
    let opened = args.model.open(options)?;
    let (device, mut model) = (opened.device, opened.model);
    model.set_fusion(!args.unfused);
    model.set_execution_mode(if args.eager {
        ExecutionMode::Eager
    } else {
        ExecutionMode::fastest_on(&device)
    });
    let longest = args.prompt_tokens.max(args.generated_tokens);
    let context = model.config().context_length();
    if args.depth.saturating_add(longest) > context {
        bail!(
            "-d {} + -p {} / -n {}: the model's context is {context} positions",
            args.depth,
            args.prompt_tokens,
            args.generated_tokens
        );
    }
    // The whole cache up front: a run that cannot fit fails before any test.
    model.reserve_context(args.depth + longest)?;
    let vocab = model.config().vocab_size as u64;
    let mut rng = SplitMix64::new(args.seed);
    let tokens: Vec<u32> = (0..longest).map(|_| rng.below(vocab) as u32).collect();
    if args.depth > 0 {
        let history: Vec<u32> = (0..args.depth).map(|_| rng.below(vocab) as u32).collect();
        eprintln!("bench: filling {} positions of context (-d)", args.depth);
        model.prefill(&history, 0)?;
    }
    let at_depth = if args.depth > 0 {
        format!(" @ d{}", args.depth)
    } else {
        String::new()
    };

    let mut rows = Vec::new();
    for (test, count, phase) in [
        (
            format!("pp{}{at_depth}", args.prompt_tokens),
            args.prompt_tokens,
            Phase::Prefill,
        ),
        (
            format!("tg{}{at_depth}", args.generated_tokens),
            args.generated_tokens,
            Phase::Decode,
        ),
    ] {
        if count == 0 {
            continue;
        }
        eprintln!(
            "bench: {test} on {} ({} repetitions + warm-up)",
            device.name(),
            args.repetitions
        );
        timed_run(&mut model, &tokens[..count], args.depth, phase)?;
        let mut rates = Vec::new();
        for _ in 0..args.repetitions {
            rates.push(count as f64 / timed_run(&mut model, &tokens[..count], args.depth, phase)?);
        }
        let spread = Spread::of(&rates).expect("at least one repetition");
        rows.push((test, count, phase, spread));
    }

    let bytes_per_token = model.weight_bytes_per_token();
    // GPU ranks each read their share of the weights from their own memory
    // at once; CPU ranks share the host's.
    let ranks = model.ranks();
    let memories = if device.backend() == "cpu" { 1 } else { ranks };
    let roofline = bandwidth.map(|gbps| gbps * 1e9 * memories as f64 / bytes_per_token as f64);
    let device_name = if ranks > 1 {
        format!("{} ×{ranks} (--tp {ranks})", device.name())
    } else {
        device.name().to_string()
    };
    let dtype = model.weights().dtype.to_string();
    match args.output {
        Output::Md => {
            let mode = match model.execution_mode() {
                ExecutionMode::Graph => "graph (one launch per token)",
                ExecutionMode::Eager => "eager",
            };
            let kernels = if model.fusion() { "fused" } else { "unfused" };
            let launch = if device.capabilities().early_launch_in_graphs {
                "early (programmatic dependent launch)"
            } else {
                "serial"
            };
            println!(
                "mode: {mode}, decode kernels: {kernels}, graph launches: {launch}, profiling: {}",
                args.profile
            );
            println!("| model | backend | device | dtype | test | t/s | % of roofline |");
            println!("| --- | --- | --- | --- | --- | --- | --- |");
            for (test, _, phase, spread) in &rows {
                let share = match (phase, roofline) {
                    (Phase::Decode, Some(bound)) => format!("{:.1}%", 100.0 * spread.mean / bound),
                    _ => "-".to_string(),
                };
                println!(
                    "| {} | {} | {} | {dtype} | {test} | {:.2} ± {:.2} | {share} |",
                    model.name(),
                    device.backend(),
                    device_name,
                    spread.mean,
                    spread.stddev
                );
            }
            match (bandwidth, roofline) {
                (Some(gbps), Some(bound)) if memories > 1 => println!(
                    "\nroofline: {:.1} MB of weights per token / ({ranks} ranks × {gbps:.1} GB/s measured copy bandwidth of rank 0's device) = {bound:.1} tok/s",
                    bytes_per_token as f64 / 1e6
                ),
                (Some(gbps), Some(bound)) => println!(
                    "\nroofline: {:.1} MB of weights per token / {gbps:.1} GB/s measured copy bandwidth = {bound:.1} tok/s",
                    bytes_per_token as f64 / 1e6
                ),
                _ => println!("\nroofline: not measured (--bandwidth-mib 0)"),
            }
            match compute {
                Some(peak) => println!(
                    "peak compute: {:.1} GFLOP/s on {} ({})",
                    peak.gflops,
                    device.name(),
                    peak.method()
                ),
                None => println!("peak compute: not measured (--compute-size 0)"),
            }
            if let (Some(gbps), Some(peak)) = (bandwidth, compute) {
                println!(
                    "ridge point: {:.2} FLOP/B (peak compute over copy bandwidth): kernels of lower arithmetic intensity are memory-bound",
                    peak.gflops / gbps
                );
            }
        }
        Output::Json => {
            let entries: Vec<_> = rows
                .iter()
                .map(|(test, count, phase, spread)| {
                    json!({
                        "model": model.name(),
                        "backend": device.backend(),
                        "device_name": device.name(),
                        "tp": ranks,
                        "devices": model.devices().iter().map(|device| device.name().to_string()).collect::<Vec<_>>(),
                        "dtype": dtype,
                        "mode": model.execution_mode().name(),
                        "fused": model.fusion(),
                        "early_launch": device.capabilities().early_launch_in_graphs,
                        "profiling": args.profile.name(),
                        "test": test,
                        "n_prompt": if *phase == Phase::Prefill { *count } else { 0 },
                        "n_gen": if *phase == Phase::Decode { *count } else { 0 },
                        "n_depth": args.depth,
                        "prefill_chunk": model.prefill_chunk(),
                        "reps": spread.count,
                        "mean_tps": spread.mean,
                        "stddev_tps": spread.stddev,
                        "weight_bytes_per_token": bytes_per_token,
                        "bandwidth_gbps": bandwidth,
                        "roofline_tps": roofline,
                        "peak_compute_gflops": compute.map(|peak| peak.gflops),
                        "compute_probe_size": compute.map(|peak| peak.size),
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&entries)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}
