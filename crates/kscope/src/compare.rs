//! `kscope compare BASE.json NEW.json`: per-op, per-layer and counter diff
//! of two profiles, as text and, with `--html`, as one HTML page with both
//! runs' views side by side. Exit 1 on a regression, 0 otherwise; 2 on bad
//! input or when the profiles' conditions differ (unless `--force`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Args;
use kernelscope::profile::{Profile, compare};
use kernelscope_report::{render_comparison, render_comparison_html};

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
    #[arg(long, default_value = "5%", value_parser = parse_threshold)]
    pub threshold: f64,
    /// Compare even when device, backend, mode, profiling level or model differ.
    #[arg(long)]
    pub force: bool,
    /// Also write the comparison as one self-contained HTML page to FILE:
    /// the verdicts coloured, the per-layer changes, both runs' charts side
    /// by side.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Overwrite the --html file if it exists.
    #[arg(long, requires = "html")]
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
    if let Some(file) = &html {
        let same = |input: &Path| {
            std::fs::canonicalize(input).ok() == std::fs::canonicalize(file.path()).ok()
                && std::fs::canonicalize(input).is_ok()
        };
        if same(&args.base) || same(&args.new) {
            bail!(
                "--html {}: one of the profiles being compared; write the page elsewhere",
                file.path().display()
            );
        }
    }
    let base = Profile::load(&args.base)?;
    let new = Profile::load(&args.new)?;
    let comparison = compare(&base, &new, args.threshold, args.force)?;
    println!("base: {} ({})", args.base.display(), base.conditions.device);
    println!("new:  {} ({})", args.new.display(), new.conditions.device);
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

#[cfg(test)]
mod tests {
    use super::parse_threshold;

    #[test]
    fn thresholds_parse_as_percent() {
        assert_eq!(parse_threshold("5%").unwrap(), 0.05);
        assert_eq!(parse_threshold("12.5").unwrap(), 0.125);
        assert!(parse_threshold("-1%").is_err());
        assert!(parse_threshold("fast").is_err());
    }
}
