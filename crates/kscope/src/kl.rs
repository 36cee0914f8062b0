//! `kscope kl`: how far a model's next-token distributions are from a
//! reference model's over one fixed token sequence, both fed the same tokens
//! position by position (teacher-forced), as llama.cpp's `llama-perplexity
//! --kl-divergence` measures a quantized file against its base: the KL
//! divergence of the model's distribution from the reference's at every
//! scored position (mean with its standard error, median, 99th and 99.9th
//! percentiles, largest) and how often both put the same token on top.
//!
//! The reference runs first and its log-probabilities are kept in memory
//! (positions × vocabulary f32), so only one model is loaded at a time.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use kernelscope::DeviceOptions;
use kernelscope::ops::sample::Sampling;
use kernelscope::profile::Phase;
use kernelscope::rng::SplitMix64;
use kernelscope_model::{ExecutionMode, Model};
use serde_json::json;

use crate::model_args::ModelArgs;
use crate::numbers;

/// The most positions `--tokens` takes (the reference's log-probabilities
/// are held in memory: 8,192 × a 128,256-token vocabulary is 4 GiB).
const MAX_TOKENS: usize = 8192;

/// Arguments of `kscope kl`.
#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)]
pub struct KlArgs {
    /// The model measured (a quantized GGUF file, say).
    #[command(flatten)]
    pub model: ModelArgs,
    /// The reference it is measured against (the base: the same weights in
    /// bf16 or f32), a GGUF file or a model directory, on the same device.
    #[arg(long, value_name = "DIR|FILE.gguf")]
    pub reference: PathBuf,
    /// Positions of the token sequence, 2 to 8192.
    #[arg(long, default_value_t = 512, value_parser = numbers::count)]
    pub tokens: usize,
    /// The first position scored: llama-perplexity scores the second half of
    /// each chunk (256 of 512), its first half only giving context.
    #[arg(long, default_value_t = 0, value_parser = numbers::count)]
    pub first_scored: usize,
    /// Seed of the random token sequence (uniform over the vocabulary).
    #[arg(long, default_value_t = 0, value_parser = numbers::seed)]
    pub seed: u64,
    /// Read the token sequence from this file instead (the first --tokens
    /// ids; any non-digits separate them, so `llama-tokenize -f TEXT --ids`
    /// output works): the tokens llama-perplexity reads from the same text.
    #[arg(long, value_name = "FILE", conflicts_with = "seed")]
    pub token_ids: Option<PathBuf>,
    /// Print the figures as JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `kscope kl`.
pub fn run(args: KlArgs) -> Result<ExitCode> {
    if !(2..=MAX_TOKENS).contains(&args.tokens) {
        bail!("--tokens {}: give 2 to {MAX_TOKENS} positions", args.tokens);
    }
    if args.first_scored >= args.tokens {
        bail!(
            "--first-scored {} leaves no position of --tokens {} to score",
            args.first_scored,
            args.tokens
        );
    }
    let mut reference_args = args.model.clone();
    reference_args.file = None;
    reference_args.model = Some(args.reference.clone());
    reference_args.preset = None;

    // The ids file is read (bounded, a regular file) before any model is
    // opened: a bad one is said at once.
    let id_text = args.token_ids.as_deref().map(read_ids_file).transpose()?;
    let (mut reference, reference_name) = open(&reference_args)?;
    let vocabulary = reference.config().vocab_size;
    let reference_shape = crate::model_shape::model_shape(reference.config());
    let tokens = match (&args.token_ids, &id_text) {
        (Some(path), Some(text)) => token_ids_of(path, text, args.tokens, vocabulary)?,
        _ => random_tokens(args.seed, args.tokens, vocabulary),
    };
    let mut reference_log_probabilities = Vec::with_capacity(args.tokens - args.first_scored);
    let quiet = args.model.quiet;
    teacher_forced(&mut reference, &tokens, "reference", quiet, |position, logits| {
        if position >= args.first_scored {
            reference_log_probabilities.push(log_softmax(logits));
        }
        Ok(())
    })?;
    drop(reference);

    let (mut model, model_name) = open(&args.model)?;
    if model.config().vocab_size != vocabulary {
        bail!(
            "{model_name} has a vocabulary of {} tokens and the reference {reference_name} {vocabulary}: KL divergence needs one vocabulary",
            model.config().vocab_size
        );
    }
    let model_shape = crate::model_shape::model_shape(model.config());
    if model_shape != reference_shape {
        eprintln!(
            "warning: {model_name} ({model_shape}) and the reference {reference_name} ({reference_shape}) are two models of one vocabulary, not one model in two formats: the divergence measures how different they are"
        );
    }
    let mut divergences = Vec::with_capacity(reference_log_probabilities.len());
    let mut same_top = 0usize;
    teacher_forced(&mut model, &tokens, "model", quiet, |position, logits| {
        if position >= args.first_scored {
            let reference = &reference_log_probabilities[position - args.first_scored];
            let log_probabilities = log_softmax(logits);
            divergences.push(kl_divergence(reference, &log_probabilities));
            same_top += usize::from(argmax(reference) == argmax(&log_probabilities));
        }
        Ok(())
    })?;
    let summary = Summary::of(&divergences, same_top);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "model": model_name,
                "reference": reference_name,
                "tokens": args.tokens,
                "first_scored": args.first_scored,
                "seed": args.seed,
                "token_ids": args.token_ids.as_ref().map(|path| path.display().to_string()),
                "scored": divergences.len(),
                "mean_kl": summary.mean,
                "mean_kl_standard_error": summary.standard_error,
                "median_kl": summary.median,
                "kl_99": summary.percentile_99,
                "kl_99_9": summary.percentile_99_9,
                "max_kl": summary.max,
                "same_top": summary.same_top,
            }))?
        );
    } else {
        println!("model: {model_name}\nreference: {reference_name}");
        let source = match &args.token_ids {
            Some(path) => format!("tokens of {}", path.display()),
            None => format!("random tokens (seed {})", args.seed),
        };
        println!(
            "{} {source}, positions {}..{} scored ({})",
            args.tokens,
            args.first_scored,
            args.tokens,
            divergences.len()
        );
        println!("Mean KLD:   {:.6} ± {:.6}", summary.mean, summary.standard_error);
        println!("Median KLD: {:.6}", summary.median);
        println!("99.0% KLD:  {:.6}", summary.percentile_99);
        println!("99.9% KLD:  {:.6}", summary.percentile_99_9);
        println!("Maximum KLD: {:.6}", summary.max);
        println!("Same top:   {:.3} %", 100.0 * summary.same_top);
    }
    Ok(ExitCode::SUCCESS)
}

/// Opens one model as `run` does (fused kernels, the device's fastest
/// execution mode), with its name for the output.
fn open(args: &ModelArgs) -> Result<(Model, String)> {
    let opened = args.open(DeviceOptions::new())?;
    let mut model = opened.model;
    model.set_execution_mode(ExecutionMode::fastest_on(&opened.device));
    let name = args
        .model
        .as_ref()
        .or(args.file.as_ref())
        .map(|path| path.display().to_string())
        .unwrap_or_else(|| format!("preset {}", args.preset.as_deref().unwrap_or("tiny")));
    Ok((model, name))
}

/// `count` token ids drawn uniformly from `vocabulary` with `seed`.
fn random_tokens(seed: u64, count: usize, vocabulary: usize) -> Vec<u32> {
    let mut random = SplitMix64::new(seed);
    (0..count)
        .map(|_| (random.next_u64() % vocabulary as u64) as u32)
        .collect()
}

/// The first `count` token ids of `path`, each below `vocabulary`.
/// The text of the ids file `path`: a regular file (a FIFO would wait for
/// a writer) of at most a few bytes per id `--tokens` can ask for.
fn read_ids_file(path: &std::path::Path) -> Result<String> {
    const MAX_BYTES: u64 = 24 * MAX_TOKENS as u64;
    let metadata = std::fs::metadata(path).with_context(|| format!("--token-ids {}", path.display()))?;
    if !metadata.is_file() {
        bail!(
            "--token-ids {}: not a regular file ({})",
            path.display(),
            kernelscope::profile::file_kind(&metadata.file_type())
        );
    }
    if metadata.len() > MAX_BYTES {
        bail!(
            "--token-ids {}: {} bytes, more than the {MAX_BYTES} that {MAX_TOKENS} ids take",
            path.display(),
            metadata.len()
        );
    }
    std::fs::read_to_string(path).with_context(|| format!("--token-ids {}", path.display()))
}

/// The first `count` ids of `text` (read from `path`), each below `vocabulary`.
fn token_ids_of(path: &std::path::Path, text: &str, count: usize, vocabulary: usize) -> Result<Vec<u32>> {
    let ids = parse_token_ids(text)
        .map_err(|number| anyhow::anyhow!("--token-ids {}: {number} is not a token id", path.display()))?;
    if ids.len() < count {
        bail!(
            "--token-ids {} holds {} ids: --tokens {count} needs that many",
            path.display(),
            ids.len()
        );
    }
    if let Some(id) = ids[..count].iter().find(|&&id| id as usize >= vocabulary) {
        bail!(
            "--token-ids {}: id {id} is outside the vocabulary of {vocabulary} tokens",
            path.display()
        );
    }
    Ok(ids[..count].to_vec())
}

/// Every run of digits in `text` as a token id, or the run that does not
/// fit one.
fn parse_token_ids(text: &str) -> std::result::Result<Vec<u32>, String> {
    text.split(|character: char| !character.is_ascii_digit())
        .filter(|number| !number.is_empty())
        .map(|number| number.parse::<u32>().map_err(|_| number.to_string()))
        .collect()
}

/// Feeds `tokens` one position at a time and hands each position's logits
/// (the distribution of the token after it) to `each`; a progress bar
/// unless `quiet`.
fn teacher_forced(
    model: &mut Model,
    tokens: &[u32],
    what: &str,
    quiet: bool,
    mut each: impl FnMut(usize, &[f32]) -> Result<()>,
) -> Result<()> {
    model.reserve_context(tokens.len())?;
    let progress = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(tokens.len() as u64)
    };
    progress.set_style(
        ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} positions").expect("a valid template"),
    );
    progress.set_message(what.to_string());
    for (position, &token) in tokens.iter().enumerate() {
        model
            .step(token, position, Phase::Decode, Sampling::GREEDY, 0.0)
            .with_context(|| format!("{what}: position {position}"))?;
        let logits = model.logits()?;
        if let Some(index) = logits.iter().position(|value| !value.is_finite()) {
            let count = logits.iter().filter(|value| !value.is_finite()).count();
            bail!(
                "{what}: position {position}: the logits hold {count} non-finite values of {} (the first, of token {index}, is {}): a KL divergence needs numbers (`kscope run` of the {what} names the weight they come from)",
                logits.len(),
                logits[index]
            );
        }
        each(position, &logits)?;
        progress.inc(1);
    }
    progress.finish_and_clear();
    Ok(())
}

/// Natural-log probabilities of `logits` (softmax, in f64 for the sums).
fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let largest = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let total: f64 = logits.iter().map(|&v| (v as f64 - largest).exp()).sum();
    let log_total = largest + total.ln();
    logits.iter().map(|&v| (v as f64 - log_total) as f32).collect()
}

/// KL(P || Q) = Σ p (ln p − ln q) of two log-probability vectors, P the
/// reference's.
fn kl_divergence(reference: &[f32], model: &[f32]) -> f64 {
    reference
        .iter()
        .zip(model)
        .map(|(&p, &q)| (p as f64).exp() * (p as f64 - q as f64))
        .sum::<f64>()
        .max(0.0)
}

/// The index of the largest value (the first of equals).
fn argmax(values: &[f32]) -> usize {
    values
        .iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |best, (index, &value)| {
            if value > best.1 { (index, value) } else { best }
        })
        .0
}

/// The figures llama-perplexity prints for its KL divergence.
#[derive(Debug, PartialEq)]
struct Summary {
    mean: f64,
    standard_error: f64,
    median: f64,
    percentile_99: f64,
    percentile_99_9: f64,
    max: f64,
    same_top: f64,
}

impl Summary {
    fn of(divergences: &[f64], same_top: usize) -> Summary {
        let count = divergences.len() as f64;
        let mean = divergences.iter().sum::<f64>() / count;
        let variance = divergences.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (count - 1.0).max(1.0);
        let mut sorted = divergences.to_vec();
        sorted.sort_by(f64::total_cmp);
        Summary {
            mean,
            standard_error: (variance / count).sqrt(),
            median: percentile(&sorted, 0.5),
            percentile_99: percentile(&sorted, 0.99),
            percentile_99_9: percentile(&sorted, 0.999),
            max: *sorted.last().expect("at least one scored position"),
            same_top: same_top as f64 / count,
        }
    }
}

/// The value at fraction `at` of sorted `values`, interpolated linearly.
fn percentile(sorted: &[f64], at: f64) -> f64 {
    let place = at * (sorted.len() - 1) as f64;
    let (below, above) = (place.floor() as usize, place.ceil() as usize);
    sorted[below] + (sorted[above] - sorted[below]) * (place - below as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_logits(seed: u64, count: usize) -> Vec<f32> {
        let mut random = SplitMix64::new(seed);
        (0..count)
            .map(|_| (random.next_u64() % 20_000) as f32 / 1000.0 - 10.0)
            .collect()
    }

    #[test]
    fn a_distribution_is_at_no_distance_from_itself_and_at_a_positive_one_from_another() {
        let reference = log_softmax(&random_logits(1, 1000));
        assert_eq!(kl_divergence(&reference, &reference), 0.0);
        let other = log_softmax(&random_logits(2, 1000));
        // The direct sum in f64 over the normalised probabilities.
        let p: Vec<f64> = reference.iter().map(|&v| (v as f64).exp()).collect();
        let q: Vec<f64> = other.iter().map(|&v| (v as f64).exp()).collect();
        let direct: f64 = p.iter().zip(&q).map(|(p, q)| p * (p / q).ln()).sum();
        let measured = kl_divergence(&reference, &other);
        assert!(measured > 0.1, "{measured}");
        assert!(
            (measured - direct).abs() < 1e-4 * direct,
            "{measured} against {direct}"
        );
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-5);
    }

    #[test]
    fn the_summary_reads_the_sorted_divergences() {
        let divergences: Vec<f64> = (0..1001).rev().map(|i| i as f64 / 1000.0).collect();
        let summary = Summary::of(&divergences, 250);
        assert!((summary.mean - 0.5).abs() < 1e-12);
        assert!((summary.median - 0.5).abs() < 1e-12);
        assert!((summary.percentile_99 - 0.99).abs() < 1e-12);
        assert!((summary.percentile_99_9 - 0.999).abs() < 1e-12);
        assert_eq!(summary.max, 1.0);
        assert!((summary.same_top - 250.0 / 1001.0).abs() < 1e-12);
        assert_eq!(argmax(&[0.5, 2.0, -1.0, 2.0]), 1);
    }

    #[test]
    fn token_ids_are_read_from_llama_tokenize_output() {
        assert_eq!(
            parse_token_ids("[128000, 791, 4062]\n"),
            Ok(vec![128000, 791, 4062])
        );
        assert_eq!(parse_token_ids("1 2\n3"), Ok(vec![1, 2, 3]));
        assert_eq!(parse_token_ids("99999999999"), Err("99999999999".to_string()));
    }

    #[test]
    fn the_token_sequence_is_fixed_by_its_seed() {
        let a = random_tokens(7, 512, 128_256);
        assert_eq!(a, random_tokens(7, 512, 128_256));
        assert_ne!(a, random_tokens(8, 512, 128_256));
        assert!(a.iter().all(|&t| t < 128_256));
    }
}
