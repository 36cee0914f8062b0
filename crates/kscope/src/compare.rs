//! `kscope compare BASE.json NEW.json`: per-op, per-layer and counter diff
//! of two profiles, as text and, with `--html`, as one HTML page with both
//! runs' views side by side. Exit 1 on a regression, 0 otherwise; 2 on bad
//! input or when the profiles' conditions differ (unless `--force`).
//!
//! One model in two weight formats (llama-3.2-1b in Q8_0 and in Q4_K_M, or
//! bf16) is not a difference that refuses: both profiles record the model's
//! shape and its weights' format, and where the shapes are equal and the
//! formats differ the comparison goes ahead with the change of format as a
//! note. The rows pair by op kind, layer and submission label, never by
//! kernel name, so `matvec_q8_0_q8` and `matvec_q4_k_q8` are one MatVec row.
//! Another shape, or a profile that records none, still refuses without
//! `--force`, the error saying why.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Args;
use kernelscope::profile::{Comparison, Conditions, GapAccount, Profile, annotate, compare, gap_account};
use kernelscope_report::{render_comparison, render_comparison_html, render_gap_account, render_gap_html};

use crate::output::OutputFile;

/// Arguments of `kscope compare`.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The baseline profile (written by `--profile-json`).
    pub base: PathBuf,
    /// The profile to check against the baseline.
    pub new: PathBuf,
    /// Relative slowdown that counts as a regression, e.g. `5%` (a bare
    /// number is read as percent). Must also exceed the repetitions' noise.
    #[arg(long, default_value = "5%", value_parser = parse_threshold, allow_hyphen_values = true)]
    pub threshold: f64,
    /// Compare even when device, backend, mode, profiling level or model
    /// differ (one model in another weight format, which both profiles
    /// record with the model's shape, compares without it).
    #[arg(long)]
    pub force: bool,
    /// Also write the comparison as one self-contained HTML page to FILE:
    /// the verdicts coloured, the per-layer changes, both runs' charts side
    /// by side.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// The model both profiles ran (a GGUF file or a Hugging Face
    /// directory): a profile's kernels that declare no bytes (a program
    /// profiled from outside without `--model`) get each role's bytes and
    /// flops from its tensors, for the account's GB/s.
    #[arg(long, value_name = "FILE|DIR")]
    pub model: Option<PathBuf>,
    /// Also write the gap account as JSON to FILE (`-`: standard output):
    /// both sides, the layers found, each role's µs per decode token and
    /// the roles merged into it, the totals.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Overwrite the --html or --json file if it exists.
    #[arg(long)]
    pub overwrite: bool,
}

/// `5%` or `5` → 0.05.
fn parse_threshold(text: &str) -> Result<f64, String> {
    let number = text.trim().trim_end_matches('%');
    match number.parse::<f64>() {
        Ok(percent) if percent.is_finite() && percent >= 0.0 => Ok(percent / 100.0),
        _ => Err(format!(
            "`{text}` is not a threshold: expected a non-negative percentage such as 5%"
        )),
    }
}

pub fn run(args: CompareArgs) -> Result<ExitCode> {
    let html = args
        .html
        .as_deref()
        .map(|path| OutputFile::check_with(path, "--html", args.overwrite, None, "--overwrite"))
        .transpose()?;
    let json = args
        .json
        .as_deref()
        .filter(|path| *path != Path::new("-"))
        .map(|path| OutputFile::check_with(path, "--json", args.overwrite, None, "--overwrite"))
        .transpose()?;
    for file in html.iter().chain(&json) {
        let same = |input: &Path| {
            std::fs::canonicalize(input).ok() == std::fs::canonicalize(file.path()).ok()
                && std::fs::canonicalize(input).is_ok()
        };
        if same(&args.base) || same(&args.new) {
            bail!(
                "{}: one of the profiles being compared; write it elsewhere",
                file.path().display()
            );
        }
    }
    let mut base = Profile::load(&args.base)?;
    let mut new = Profile::load(&args.new)?;
    kernelscope::profile::require_timed_work("base", &base)?;
    kernelscope::profile::require_timed_work("new", &new)?;
    // Profiles written before roles were recorded, or by a kscope that
    // did not find them, get their layers and roles now.
    let mut found = Vec::new();
    for (name, profile) in [("base", &mut base), ("new", &mut new)] {
        if profile.conditions.anatomy.is_none() || !has_roles(profile) {
            let anatomy = annotate(profile);
            found.push(format!("{name}: {}", anatomy.describe()));
        }
    }
    if let Some(model) = &args.model {
        for profile in [&mut base, &mut new] {
            if profile.conditions.program.is_some() {
                crate::profile_program::describe_model(profile, Some(model))?;
            }
        }
    }
    let programs = (program_of(&base.conditions), program_of(&new.conditions));
    let account = (has_roles(&base) || has_roles(&new)).then(|| gap_account(&base, &new));
    if programs.0 != programs.1 {
        // Two engines: the account is the comparison. What the hardware
        // differs in is said first, and refuses without --force.
        let hardware: Vec<String> = base
            .conditions
            .differences(&new.conditions)
            .into_iter()
            .filter(|difference| {
                ["device:", "backend:", "driver:"]
                    .iter()
                    .any(|name| difference.starts_with(name))
            })
            .filter(|difference| !difference.starts_with("driver:") || !difference.contains("none"))
            .collect();
        if !hardware.is_empty() && !args.force {
            return Err(kernelscope::Error::ConditionsDiffer {
                differences: hardware.join(", "),
            }
            .into());
        }
        println!(
            "base: {} ({}, {})",
            args.base.display(),
            programs.0,
            describe_run(&base.conditions)
        );
        println!(
            "new:  {} ({}, {})",
            args.new.display(),
            programs.1,
            describe_run(&new.conditions)
        );
        if !hardware.is_empty() {
            println!("compared despite different hardware: {}", hardware.join(", "));
        }
        for line in &found {
            println!("{line}");
        }
        let Some(account) = account else {
            bail!(
                "neither profile has roles to line up ({}), so there is no account to give",
                found.join("; ")
            );
        };
        print!("{}", render_gap_account(&account));
        write_account(&account, args.json.as_deref(), json.as_ref())?;
        if let Some(file) = &html {
            let name = |path: &Path| path.display().to_string();
            let page = render_gap_html(&base, &new, &account, (&name(&args.base), &name(&args.new)));
            file.write(page.as_bytes())?;
            println!("gap account written to {}", file.path().display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let comparison = compare_models(&base, &mut new, args.threshold, args.force)?;
    println!(
        "base: {} ({})",
        args.base.display(),
        describe_run(&base.conditions)
    );
    println!("new:  {} ({})", args.new.display(), describe_run(&new.conditions));
    for line in &found {
        println!("{line}");
    }
    if let Some(account) = &account {
        print!("{}", render_gap_account(account));
        write_account(account, args.json.as_deref(), json.as_ref())?;
        println!();
    }
    print!("{}", render_comparison(&comparison));
    if let Some(file) = &html {
        let name = |path: &std::path::Path| path.display().to_string();
        let page = render_comparison_html(&base, &new, &comparison, (&name(&args.base), &name(&args.new)));
        file.write(page.as_bytes())?;
        println!("comparison written to {}", file.path().display());
    }
    Ok(if comparison.regressed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Whether any dispatch of the profile has a role.
fn has_roles(profile: &Profile) -> bool {
    profile
        .dispatches
        .iter()
        .any(|dispatch| !dispatch.roles.is_empty())
}

/// What ran, for telling two engines apart: the program profiled from
/// outside, or kscope's engine.
fn program_of(conditions: &Conditions) -> String {
    conditions.program.as_ref().map_or_else(
        || "kscope's engine".to_string(),
        kernelscope::profile::Program::name,
    )
}

/// Writes the account's JSON to `--json` (standard output for `-`).
fn write_account(account: &GapAccount, path: Option<&Path>, file: Option<&OutputFile>) -> Result<()> {
    match (path, file) {
        (Some(path), None) if path == Path::new("-") => println!("{}", account.to_json()),
        (_, Some(file)) => {
            file.write(account.to_json().as_bytes())?;
            println!("gap account (JSON) written to {}", file.path().display());
        }
        _ => {}
    }
    Ok(())
}

/// The device a profile ran on and, where recorded, its weights' format.
fn describe_run(conditions: &Conditions) -> String {
    match &conditions.weight_format {
        Some(format) => format!("{}, weights {format}", conditions.device),
        None => conditions.device.clone(),
    }
}

/// How the models of two profiles whose model strings differ relate.
#[derive(Debug, PartialEq)]
enum Models {
    /// One model (the same shape) in two weight formats.
    OtherFormat,
    /// Not known to be one model; why, for the error.
    Differ(String),
}

/// Whether `base` and `new`, whose models differ, ran one model in two
/// weight formats: both record the shape and the format, the shapes are
/// equal and the formats are not (`Q8_0` vs `Q4_K_M`, `bf16` vs `Q4_K_M`).
fn judge_models(base: &Conditions, new: &Conditions) -> Models {
    let (Some(base_shape), Some(new_shape)) = (&base.model_shape, &new.model_shape) else {
        return Models::Differ(
            "a profile records no model shape, so whether it is the same model in another weight format is unknown"
                .into(),
        );
    };
    if base_shape != new_shape {
        return Models::Differ(format!("another model: {}", shape_change(base_shape, new_shape)));
    }
    match (&base.weight_format, &new.weight_format) {
        (Some(a), Some(b)) if !a.eq_ignore_ascii_case(b) => Models::OtherFormat,
        (Some(format), Some(_)) => Models::Differ(format!(
            "the same shape and weight format ({format}): another model or file"
        )),
        _ => Models::Differ("a profile records no weight format".into()),
    }
}

/// The parts of two shapes that differ (`16 layers vs 32 layers, hidden
/// 2048 vs hidden 4096`), or both whole where they do not line up.
fn shape_change(base: &str, new: &str) -> String {
    let parts = |shape: &str| {
        let (architecture, rest) = shape.split_once(": ").unwrap_or(("", shape));
        std::iter::once(architecture.to_string())
            .chain(rest.split(", ").map(str::to_string))
            .collect::<Vec<_>>()
    };
    let (base_parts, new_parts) = (parts(base), parts(new));
    if base_parts.len() != new_parts.len() {
        return format!("{base} vs {new}");
    }
    base_parts
        .iter()
        .zip(&new_parts)
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("{a} vs {b}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// [`compare`], except that one model in two weight formats is not a
/// difference of conditions: it refuses (without `force`) only for the
/// others, and notes the change of format. Another model refuses naming
/// why. `new`'s model is set to `base`'s for the comparison only.
fn compare_models(base: &Profile, new: &mut Profile, threshold: f64, force: bool) -> Result<Comparison> {
    let (base_conditions, new_conditions) = (&base.conditions, &new.conditions);
    // One file reached by two paths (`./m.gguf` and `m.gguf`, or from
    // another folder) is one model.
    let one_file = match (&base_conditions.model, &new_conditions.model) {
        (Some(base_model), Some(new_model)) if base_model != new_model => {
            one_model_file(base_model, new_model)
        }
        _ => false,
    };
    let models = (base_conditions.model != new_conditions.model && !one_file)
        .then(|| judge_models(base_conditions, new_conditions));
    // The other differences, the library's own judgement of them.
    let mut differences = base_conditions.differences(&Conditions {
        model: base_conditions.model.clone(),
        ..new_conditions.clone()
    });
    if let Some(Models::Differ(why)) = &models {
        differences.push(format!(
            "model: {} vs {} ({why})",
            base_conditions.model.as_deref().unwrap_or("none"),
            new_conditions.model.as_deref().unwrap_or("none")
        ));
    }
    if !differences.is_empty() && !force {
        return Err(kernelscope::Error::ConditionsDiffer {
            differences: differences.join(", "),
        }
        .into());
    }
    let format_note = format_change(base_conditions, new_conditions);
    let comparison = if models == Some(Models::OtherFormat) || one_file {
        let model = std::mem::replace(&mut new.conditions.model, base.conditions.model.clone());
        let comparison = compare(base, new, threshold, force);
        new.conditions.model = model;
        comparison
    } else {
        compare(base, new, threshold, force)
    };
    let mut comparison = comparison?;
    comparison.notes.splice(0..0, format_note);
    Ok(comparison)
}

/// Whether two models' names (a path, then what it holds in brackets:
/// `m.gguf (Q8_0: 58 Q8_0, 17 F32)`) name one file that holds the same.
fn one_model_file(base: &str, new: &str) -> bool {
    let split = |model: &str| match model.rsplit_once(" (") {
        Some((path, held)) if model.ends_with(')') => (path.to_string(), held.to_string()),
        _ => (model.to_string(), String::new()),
    };
    let ((base_path, base_held), (new_path, new_held)) = (split(base), split(new));
    match (std::fs::canonicalize(base_path), std::fs::canonicalize(new_path)) {
        (Ok(base_file), Ok(new_file)) => base_file == new_file && base_held == new_held,
        _ => false,
    }
}

/// The note that the weights' format changed, where both profiles record
/// one and they differ.
fn format_change(base: &Conditions, new: &Conditions) -> Option<String> {
    let (Some(base_format), Some(new_format)) = (&base.weight_format, &new.weight_format) else {
        return None;
    };
    if base_format.eq_ignore_ascii_case(new_format) {
        return None;
    }
    let model = match (&base.model, &new.model) {
        (Some(a), Some(b)) if a != b => format!("; model: {a} vs {b}"),
        _ => String::new(),
    };
    let shape = match (&base.model_shape, &new.model_shape) {
        (Some(a), Some(b)) if a == b => format!(", one model shape ({a})"),
        _ => String::new(),
    };
    Some(format!(
        "weight format: {base_format} vs {new_format}{shape}{model}; rows pair by op kind, layer and label, never by kernel name, so kernels that differ only by the format they read (matvec_q8_0_q8, matvec_q4_k_q8) are one row"
    ))
}

#[cfg(test)]
mod tests {
    use super::{Models, judge_models, parse_threshold, shape_change};

    #[test]
    fn one_shape_in_two_formats_is_one_model() {
        let run = |shape: Option<&str>, format: Option<&str>| {
            let mut conditions = kernelscope::testing::synthetic_profile(1, 1.0, 1).conditions;
            conditions.model_shape = shape.map(str::to_string);
            conditions.weight_format = format.map(str::to_string);
            conditions
        };
        let shape = "llama: 16 layers, hidden 2048, vocab 128256";
        let q8 = run(Some(shape), Some("Q8_0"));
        assert_eq!(
            judge_models(&q8, &run(Some(shape), Some("Q4_K_M"))),
            Models::OtherFormat
        );
        assert_eq!(
            judge_models(&run(Some(shape), Some("bf16")), &q8),
            Models::OtherFormat
        );
        // A BF16 file and a bf16 preset read one format.
        let Models::Differ(why) =
            judge_models(&run(Some(shape), Some("BF16")), &run(Some(shape), Some("bf16")))
        else {
            panic!("one format");
        };
        assert!(why.contains("the same shape and weight format"), "{why}");
        let Models::Differ(why) = judge_models(
            &q8,
            &run(
                Some("qwen2: 16 layers, hidden 2048, vocab 151936"),
                Some("Q4_K_M"),
            ),
        ) else {
            panic!("another shape");
        };
        assert_eq!(why, "another model: llama vs qwen2, vocab 128256 vs vocab 151936");
        for unknown in [run(None, Some("Q4_K_M")), run(Some(shape), None)] {
            assert!(matches!(judge_models(&q8, &unknown), Models::Differ(_)));
            assert!(matches!(judge_models(&unknown, &q8), Models::Differ(_)));
        }
        assert_eq!(
            shape_change("a: 1 layers", "a: 1 layers, hidden 2"),
            "a: 1 layers vs a: 1 layers, hidden 2"
        );
    }

    #[test]
    fn thresholds_parse_as_percent() {
        assert_eq!(parse_threshold("5%").unwrap(), 0.05);
        assert_eq!(parse_threshold("12.5").unwrap(), 0.125);
        assert!(parse_threshold("-1%").is_err());
        assert!(parse_threshold("fast").is_err());
    }
}
