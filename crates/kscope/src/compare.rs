//! `kscope compare BASE.json NEW.json`: per-op, per-layer and counter diff
//! of two profiles. Exit 1 on a regression, 0 otherwise; 2 on bad input or
//! when the profiles' conditions differ (unless `--force`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use kernelscope::profile::{Profile, compare};

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
    let base = Profile::load(&args.base)?;
    let new = Profile::load(&args.new)?;
    let comparison = compare(&base, &new, args.threshold, args.force)?;
    println!("base: {} ({})", args.base.display(), base.conditions.device);
    println!("new:  {} ({})", args.new.display(), new.conditions.device);
    print!("{}", comparison.render());
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
