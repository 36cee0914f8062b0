//! `kscope run`: generate tokens with a model and, with `--profile`, show
//! where every microsecond of every token went.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, bail};
use kernelscope::ops::sample::Sampling;
use kernelscope::profile::{Ceilings, Phase, ProfileLevel};
use kernelscope::{Device, DeviceOptions};
use kernelscope_model::{ExecutionMode, Generation, GenerationRequest, Model, TextStream, Tokenizer};
use kernelscope_report::render_report_with;

use crate::model_args::describe;
use crate::output::OutputFile;
use crate::prompt::{PromptSource, prompt_tokens, stop_tokens};

mod args;

pub use args::RunArgs;

/// The flags whose values clap cannot judge alone: the sampling range and
/// the count of chat turns.
fn check_flag_values(args: &RunArgs) -> Result<()> {
    if !(0.0..=1.0).contains(&args.top_p) || args.top_p == 0.0 {
        bail!("--top-p must be in (0, 1], got {}", args.top_p);
    }
    if !args.temperature.is_finite() || args.temperature < 0.0 {
        bail!(
            "--temperature must be a non-negative number, got {}",
            args.temperature
        );
    }
    if !args.chat.is_empty() && args.chat.len().is_multiple_of(2) {
        bail!(
            "--chat was given {} times: turns alternate user, assistant, user, ..., so the count must be odd (ending with the user)",
            args.chat.len()
        );
    }
    Ok(())
}

/// The files a run writes, each checked before the run starts.
struct Outputs {
    logits_out: Option<OutputFile>,
    profile_json: Option<OutputFile>,
    trace: Option<OutputFile>,
    html: Option<OutputFile>,
}

/// Checks every output flag (none may overwrite a file of `protected`, the
/// model's own folder) and that no two of them name the same file.
/// Started as one of several ranks, each rank writes its own files: the
/// rank goes before a path's extension (`logits.npy` → `logits.rank1.npy`),
/// so every process of one command line writes beside the others.
fn check_outputs(args: &RunArgs, protected: Option<&Path>) -> Result<Outputs> {
    let rank = crate::model_args::launched_rank();
    let output = |path: &Option<PathBuf>, flag| {
        path.as_deref()
            .map(|path| match rank {
                Some(rank) => OutputFile::check(&rank_path(path, rank), flag, args.force, protected),
                None => OutputFile::check(path, flag, args.force, protected),
            })
            .transpose()
    };
    let outputs = Outputs {
        logits_out: output(&args.logits_out, "--logits-out")?,
        profile_json: output(&args.profile_json, "--profile-json")?,
        trace: output(&args.trace, "--trace")?,
        html: output(&args.html, "--html")?,
    };
    let mut paths: Vec<PathBuf> = [
        &outputs.logits_out,
        &outputs.profile_json,
        &outputs.trace,
        &outputs.html,
    ]
    .into_iter()
    .flatten()
    .map(|file| std::path::absolute(file.path()).unwrap_or_else(|_| file.path().to_path_buf()))
    .collect();
    paths.sort();
    if paths.windows(2).any(|pair| pair[0] == pair[1]) {
        bail!("--logits-out, --profile-json, --trace and --html must name different files");
    }
    Ok(outputs)
}

/// `path` with `.rank{rank}` before its extension (or at its end).
fn rank_path(path: &Path, rank: usize) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match path.extension() {
        Some(extension) => format!("{stem}.rank{rank}.{}", extension.to_string_lossy()),
        None => format!("{stem}.rank{rank}"),
    };
    path.with_file_name(name)
}

/// The device options of the run: the environment's, with dispatch-level
/// profiling when a flag asks for a profile.
fn device_options(args: &RunArgs, profiling: bool) -> Result<DeviceOptions> {
    let mut options = DeviceOptions::from_env()?;
    if profiling {
        // The flags ask for a per-dispatch report: they win over KSCOPE_PROFILE.
        options = options.profile(ProfileLevel::Dispatch);
    }
    if args.serial_launch {
        options = options.serial_launch();
    }
    if args.persistent_steps {
        options = options.persistent_steps();
    }
    if args.check_finite {
        options = options.check_finite(true);
    }
    if let Some(selection) = args.profile_tokens {
        if options.profile_level() == ProfileLevel::Off {
            bail!(
                "--profile-tokens {selection}: nothing is profiled; add --profile, --profile-json, --trace or --html"
            );
        }
        options = options.profile_tokens(selection);
    }
    Ok(options)
}

/// The ceilings for the report's roofline, measured on a handle of their
/// own without CUPTI before the profiled device exists; none when the run
/// is not profiled.
fn roofline_ceilings(args: &RunArgs, profiling: bool) -> Result<Ceilings> {
    if !profiling {
        return Ok(Ceilings::default());
    }
    Ok(crate::ceilings::measure(args.model.first_device(), None, args.compute_size)?.ceilings)
}

/// How the step runs on `device`, saying so when profiling forces it eager.
fn execution_mode(args: &RunArgs, device: &Device) -> ExecutionMode {
    // GPUs replay the captured step (one graph launch per token); the CPU
    // gains nothing from replay, so it runs eagerly. Where dispatches inside
    // graphs cannot be timed (no CUPTI), dispatch-level profiling runs the
    // step eagerly, and says so: the mode is part of the profile's conditions.
    // A graph runs whole, so its kernels' outputs could only be checked
    // after the last one: --check-finite checks each kernel as it ends.
    let mode = if args.eager || args.check_finite {
        ExecutionMode::Eager
    } else {
        ExecutionMode::fastest_on(device)
    };
    if mode.hides_dispatch_times(device) {
        println!(
            "note: dispatches inside CUDA graphs cannot be timed here (no CUPTI); profiling runs the step eagerly, with an event pair around each launch"
        );
        return ExecutionMode::Eager;
    }
    mode
}

/// What runs on what: the device, the model, its context, the prompt.
fn print_setup(device: &Device, device_reason: &str, model: &Model, prompt: &[u32]) {
    println!("device: {} ({device_reason})", device.name());
    println!("model: {}", describe(model));
    if let Some(window) = model.config().sliding_window {
        println!(
            "note: sliding-window attention (window {window}) is not implemented; the context stops at {} positions, where it agrees with full attention",
            model.config().context_length()
        );
    }
    println!("prompt: {} tokens {:?}", prompt.len(), prompt);
}

/// Generates as the flags ask, printing a chat reply as it comes.
fn generate(
    args: &RunArgs,
    model: &mut Model,
    prompt: &[u32],
    stop_tokens: &[u32],
    tokenizer: Option<&Tokenizer>,
    keep_logits: bool,
) -> Result<Generation> {
    let request = GenerationRequest {
        prompt,
        max_tokens: args.max_tokens,
        sampling: Sampling {
            temperature: args.temperature,
            top_p: args.top_p,
        },
        seed: args.seed,
        stop_at_eos: !args.ignore_eos,
        stop_tokens,
        keep_logits,
    };
    // A chat reply is printed as it is generated.
    let mut stream = match (tokenizer, !args.chat.is_empty()) {
        (Some(tokenizer), true) => {
            print!("assistant: ");
            Some(TextStream::new(tokenizer))
        }
        _ => None,
    };
    let generation = model.generate_streaming(&request, |token| {
        if let Some(stream) = stream.as_mut() {
            print!("{}", stream.push(token)?);
            let _ = std::io::stdout().flush();
        }
        Ok(())
    })?;
    if let Some(stream) = stream.as_mut() {
        println!("{}", stream.finish()?);
    }
    Ok(generation)
}

/// The tokens generated, their text, why generation stopped, and the
/// prefill and decode rates.
fn print_generation(generation: &Generation, tokenizer: Option<&Tokenizer>) -> Result<()> {
    println!(
        "generated: {} tokens {:?}",
        generation.generated.len(),
        generation.generated
    );
    if let Some(tokenizer) = tokenizer {
        println!("text: {:?}", tokenizer.decode(&generation.generated)?);
    }
    if generation.stopped_at_eos {
        println!("(stopped at an end-of-sequence token; --ignore-eos keeps going)");
    }
    let (prefill_count, prefill_time) = generation.phase_time(Phase::Prefill);
    let (decode_count, decode_time) = generation.phase_time(Phase::Decode);
    let rate = |count: usize, time: std::time::Duration| {
        if time.is_zero() {
            0.0
        } else {
            count as f64 / time.as_secs_f64()
        }
    };
    println!(
        "prefill: {prefill_count} tokens in {:.2} ms ({:.1} tok/s) | decode: {decode_count} tokens in {:.2} ms ({:.1} tok/s)",
        prefill_time.as_secs_f64() * 1e3,
        rate(prefill_count, prefill_time),
        decode_time.as_secs_f64() * 1e3,
        rate(decode_count, decode_time),
    );
    Ok(())
}

/// Writes `--logits-out`: every processed position's logits as .npy.
fn write_logits(file: &OutputFile, generation: &Generation, vocab: usize) -> Result<()> {
    file.write(&kernelscope_model::npy::encode_f32_2d(&generation.logits)?)?;
    println!(
        "logits: {} rows x {vocab} written to {}",
        generation.logits.len(),
        file.path().display()
    );
    Ok(())
}

/// `kscope run`: checks every flag and output first, then opens the model,
/// generates, prints what it generated and, when asked, the profile.
pub fn run(args: RunArgs) -> Result<ExitCode> {
    // Flags and outputs are checked before any work, so a long run cannot
    // end in a refusal to write its results.
    check_flag_values(&args)?;
    let location = args.model.location()?;
    let protected = location.as_ref().map(|location| location.protected.clone());
    let Outputs {
        logits_out,
        profile_json,
        trace,
        html,
    } = check_outputs(&args, protected.as_deref())?;
    let profiling =
        args.profile || args.profile_json.is_some() || args.trace.is_some() || args.html.is_some();
    let options = device_options(&args, profiling)?;
    let ceilings = roofline_ceilings(&args, profiling)?;
    let opened = args.model.open(options)?;
    let (device, mut model, tokenizer) = (opened.device, opened.model, opened.tokenizer);
    let stop_tokens = stop_tokens(opened.directory.as_deref(), &model)?;
    model.set_execution_mode(execution_mode(&args, &device));
    model.set_fusion(!args.unfused);
    let source = PromptSource {
        directory: opened.directory.as_deref(),
        tokenizer: tokenizer.as_ref(),
        tokenizer_problem: opened.tokenizer_problem.as_deref(),
        gguf_chat: opened.gguf_chat.as_ref(),
    };
    let prompt = prompt_tokens(&args, source)?;
    print_setup(&device, &opened.device_reason, &model, &prompt);
    // Loading (and generating a preset's weights on the device) is not the run.
    for rank_device in model.devices() {
        rank_device.profiler().reset();
    }
    model.clear_expert_counts()?;
    let generation = generate(
        &args,
        &mut model,
        &prompt,
        &stop_tokens,
        tokenizer.as_ref(),
        logits_out.is_some(),
    )
    .map_err(|error| {
        let gguf = location.as_ref().and_then(|location| location.gguf.as_deref());
        crate::model_errors::locate_non_finite(error, gguf)
    })?;
    print_generation(&generation, tokenizer.as_ref())?;
    if let Some(problem) = &opened.tokenizer_problem {
        println!("text: not decoded, the model's tokenizer cannot be built: {problem}");
    }
    if let Some(file) = &logits_out {
        write_logits(file, &generation, model.config().vocab_size)?;
    }
    if profiling {
        let mode = model.execution_mode().name();
        let mut conditions = device
            .conditions(mode, Some(model.name().to_string()))
            .with_ceilings(ceilings);
        // What `kscope compare` tells one model in two formats by.
        conditions.weight_format = Some(model.weight_format());
        conditions.model_shape = Some(crate::model_shape::model_shape(model.config()));
        if conditions.backend == "cpu" {
            conditions.cpu_kernels = Some(kernelscope::ops::describe_cpu_kernels());
        }
        let profile = model.profile(conditions);
        if args.profile {
            print!("\n{}", render_report_with(&profile, args.report.options()));
        }
        if let Some(file) = &profile_json {
            file.write_with(|writer| profile.write_json(writer))?;
            println!("profile written to {}", file.path().display());
        }
        crate::report::write_trace_and_page(&profile, trace.as_ref(), html.as_ref(), &args.report)?;
    }
    Ok(ExitCode::SUCCESS)
}
