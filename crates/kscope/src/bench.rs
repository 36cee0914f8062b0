//! `kscope bench`: prompt-processing and generation throughput in the manner
//! of llama-bench (mean ± stddev over repetitions, markdown or JSON), next to
//! the roofline of decoding on this device (a token's weight bytes at the
//! measured read ceiling) and its compute ceiling.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Result, bail};
use kernelscope::profile::{Phase, ProfileLevel, Spread};
use kernelscope::rng::SplitMix64;
use kernelscope::{Device, DeviceOptions};
use kernelscope_model::{ExecutionMode, Model};

mod args;
mod json;
mod results;

pub use args::{BenchArgs, Output};
use results::{Ceilings, Row};

/// The most repetitions `-r` takes: each one runs the whole test.
const MAX_REPETITIONS: usize = 10_000;

/// The largest bandwidth probe (`--bandwidth-mib`): two buffers this size.
const MAX_BANDWIDTH_MIB: usize = 16_384;

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

/// Limits clap cannot express: repetitions and the probe's size in range,
/// and something to measure.
fn check_limits(args: &BenchArgs) -> Result<()> {
    if !(1..=MAX_REPETITIONS).contains(&args.repetitions) {
        bail!(
            "-r {}: repetitions must be in 1..={MAX_REPETITIONS}",
            args.repetitions
        );
    }
    if let Some(mib) = args.bandwidth_mib
        && mib > MAX_BANDWIDTH_MIB
    {
        bail!(
            "--bandwidth-mib {}: the probe is at most {MAX_BANDWIDTH_MIB} MiB",
            mib
        );
    }
    if let Some(selection) = args.profile_tokens
        && args.profile == ProfileLevel::Off
    {
        bail!(
            "--profile-tokens {selection}: nothing is profiled; add --profile submission or --profile dispatch"
        );
    }
    if args.prompt_tokens == 0 && args.generated_tokens == 0 {
        bail!("nothing to measure: -p and -n are both 0");
    }
    Ok(())
}

/// Opens the model on its devices at the bench's profiling level, with
/// the kernels and execution mode the flags ask for.
fn open_model(args: &BenchArgs, profile: ProfileLevel) -> Result<(Device, Model)> {
    let mut options = DeviceOptions::new().profile(profile);
    if let Some(selection) = args.profile_tokens {
        options = options.profile_tokens(selection);
    }
    if args.serial_launch {
        options = options.serial_launch();
    }
    if args.persistent_steps {
        options = options.persistent_steps();
    }
    let opened = args.model.open(options)?;
    let (device, mut model) = (opened.device, opened.model);
    model.set_fusion(!args.unfused);
    model.set_execution_mode(if args.eager {
        ExecutionMode::Eager
    } else {
        ExecutionMode::fastest_on(&device)
    });
    Ok((device, model))
}

/// The random tokens the tests run, with the KV cache reserved for them
/// and filled to the depth `-d` asks for (not timed).
fn prepare_tokens(args: &BenchArgs, model: &mut Model) -> Result<Vec<u32>> {
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
    Ok(tokens)
}

/// Runs the prompt test and the generation test (each skipped at 0
/// tokens): a warm-up, then the repetitions, each timed whole.
fn measure(args: &BenchArgs, device: &Device, model: &mut Model, tokens: &[u32]) -> Result<Vec<Row>> {
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
        timed_run(model, &tokens[..count], args.depth, phase)?;
        let mut rates = Vec::new();
        for _ in 0..args.repetitions {
            rates.push(count as f64 / timed_run(model, &tokens[..count], args.depth, phase)?);
        }
        let spread = Spread::of(&rates).expect("at least one repetition");
        rows.push(Row {
            test,
            count,
            phase,
            spread,
            rates,
            unprofiled: None,
        });
    }
    Ok(rows)
}

/// Rounds of an unprofiled and a profiled run when `--profile` asks what
/// profiling costs (after a warm-up pass).
const COST_ROUNDS: usize = 2;

/// [`measure`] on a model of its own at `level`, closed when it returns.
fn measure_apart(args: &BenchArgs, level: ProfileLevel) -> Result<Vec<Row>> {
    let (device, mut model) = open_model(args, level)?;
    let tokens = prepare_tokens(args, &mut model)?;
    measure(args, &device, &mut model, &tokens)
}

/// Adds each row's rates to the rates gathered for that row so far.
fn gather(gathered: &mut Vec<Vec<f64>>, rows: &[Row]) {
    gathered.resize(rows.len(), Vec::new());
    for (rates, row) in gathered.iter_mut().zip(rows) {
        rates.extend_from_slice(&row.rates);
    }
}

/// The device as the table names it: with its rank count when split.
fn device_name(device: &Device, model: &Model) -> String {
    let ranks = model.ranks();
    if let Some(rank) = model.process_rank() {
        format!("{} (rank {rank} of {ranks}, a process each)", device.name())
    } else if ranks > 1 {
        format!("{} ×{ranks} (--tp {ranks})", device.name())
    } else {
        device.name().to_string()
    }
}

/// The markdown table, then the roofline, peak compute and ridge point.
fn print_markdown(args: &BenchArgs, device: &Device, model: &Model, rows: &[Row], ceilings: &Ceilings) {
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
    if device.backend() == "cpu" {
        println!("cpu kernels: {}", kernelscope::ops::describe_cpu_kernels());
    }
    let dtype = model.weight_format();
    let device_name = device_name(device, model);
    let costed = rows.iter().any(|row| row.unprofiled.is_some());
    let (cost_header, cost_rule) = if costed {
        (" unprofiled t/s | profiling cost |", " --- | --- |")
    } else {
        ("", "")
    };
    println!("| model | backend | device | dtype | test | t/s | % of roofline |{cost_header}");
    println!("| --- | --- | --- | --- | --- | --- | --- |{cost_rule}");
    for row in rows {
        let Row {
            test, phase, spread, ..
        } = row;
        let share = match (phase, ceilings.roofline) {
            (Phase::Decode, Some(bound)) => format!("{:.1}%", 100.0 * spread.mean / bound),
            _ => "-".to_string(),
        };
        let cost = match (&row.unprofiled, row.profiling_cost()) {
            (Some(unprofiled), Some(cost)) => format!(
                " {:.2} ± {:.2} | {:.1}% |",
                unprofiled.mean,
                unprofiled.stddev,
                100.0 * cost
            ),
            _ => String::new(),
        };
        println!(
            "| {} | {} | {} | {dtype} | {test} | {:.2} ± {:.2} | {share} |{cost}",
            model.name(),
            device.backend(),
            device_name,
            spread.mean,
            spread.stddev
        );
    }
    if costed {
        let tokens = args
            .profile_tokens
            .map(|selection| format!(" --profile-tokens {selection}"))
            .unwrap_or_default();
        println!(
            "profiling cost: 1 - rate at --profile {}{tokens} / rate unprofiled, measured in this process after a warm-up pass, the two alternated twice (repetitions of both runs)",
            args.profile
        );
    }
    let (ranks, megabytes) = (model.devices().len(), ceilings.bytes_per_token as f64 / 1e6);
    let read = ceilings.measured.ceilings.read.as_ref();
    match (read, ceilings.roofline) {
        (Some(read), Some(bound)) if ceilings.memories > 1 => println!(
            "\nroofline: {megabytes:.1} MB of weights per token / ({ranks} ranks × {:.1} GB/s read ceiling of rank 0's device) = {bound:.1} tok/s",
            read.value
        ),
        (Some(read), Some(bound)) => println!(
            "\nroofline: {megabytes:.1} MB of weights per token / {:.1} GB/s read ceiling = {bound:.1} tok/s",
            read.value
        ),
        _ => println!("\nroofline: not measured (--bandwidth-mib 0)"),
    }
    println!("ceilings of {}:", device.name());
    for line in crate::ceilings::lines(&ceilings.measured) {
        println!("  {line}");
    }
    if ceilings.measured.ceilings.compute.is_none() {
        println!("  compute ceiling: not measured (--compute-size 0)");
    }
}

/// `kscope bench`: measures the ceilings, then each test, and prints them
/// as a markdown table or JSON.
pub fn run(args: BenchArgs) -> Result<ExitCode> {
    check_limits(&args)?;
    // Measured first, on an unprofiled handle, so neither the model nor
    // CUPTI (at --profile dispatch) is in the way.
    let measured =
        crate::ceilings::measure(args.model.first_device(), args.bandwidth_mib, args.compute_size)?;
    // What profiling costs is measured against unprofiled runs of the same
    // tests, alternated with the profiled ones. A GPU slows over its first
    // seconds under load: on an H100, llama-3.2-1b decoded 871 tok/s in a
    // process's first run and 856 in its second, unprofiled both times and
    // on the same model, so a baseline measured once, first, read 1.8 %
    // fast. A discarded unprofiled pass warms the GPU; then unprofiled and
    // profiled runs alternate, each on a model of its own that is gone
    // before the next opens (two would not fit a large model's GPU).
    let mut unprofiled: Vec<Vec<f64>> = Vec::new();
    let mut profiled: Vec<Vec<f64>> = Vec::new();
    if args.profile != ProfileLevel::Off {
        eprintln!("bench: a warm-up pass, unprofiled and not counted");
        measure_apart(&args, ProfileLevel::Off)?;
        for round in 0..COST_ROUNDS {
            gather(&mut unprofiled, &measure_apart(&args, ProfileLevel::Off)?);
            if round + 1 < COST_ROUNDS {
                gather(&mut profiled, &measure_apart(&args, args.profile)?);
            }
        }
    }
    // The last profiled run keeps its model, which the figures describe.
    let (device, mut model) = open_model(&args, args.profile)?;
    let tokens = prepare_tokens(&args, &mut model)?;
    let mut rows = measure(&args, &device, &mut model, &tokens)?;
    if args.profile != ProfileLevel::Off {
        gather(&mut profiled, &rows);
        for ((row, profiled), unprofiled) in rows.iter_mut().zip(&profiled).zip(&unprofiled) {
            row.spread = Spread::of(profiled).expect("at least one repetition");
            row.unprofiled = Spread::of(unprofiled);
        }
    }
    let ceilings = Ceilings::of(&device, &model, measured);
    match args.output {
        Output::Md => print_markdown(&args, &device, &model, &rows, &ceilings),
        Output::Json => json::print_json(&args, &device, &model, &rows, &ceilings)?,
    }
    Ok(ExitCode::SUCCESS)
}
