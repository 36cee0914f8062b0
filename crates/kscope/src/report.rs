//! `kscope report PROFILE.json`: the text report of a saved profile (the
//! JSON is the single source), and from it the HTML page (`--html`) and a
//! Chrome trace (`--trace`, a window of tokens with `--trace-tokens`). The
//! flags that shape the report are shared with `kscope run --profile`.

use std::ops::Range;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Args;
use kernelscope::profile::Profile;
use kernelscope_report::{ReportOptions, render_html, render_report_with, write_chrome_trace};

use crate::numbers;
use crate::output::OutputFile;

/// How the text report and the trace are cut, for `run` and `report`.
#[derive(Args, Debug, Clone, Default)]
pub struct ReportFlags {
    /// Show every layer, scope and kernel on its own row; by default
    /// identical layers fold into one row (`layer.0–15 ×16 ±1.2%`), a layer
    /// that differs from them by more than the noise stays apart (marked *),
    /// and the per-kernel table shows the slowest --top.
    #[arg(long)]
    pub full: bool,
    /// How many kernels the per-kernel table shows, slowest first (default
    /// 10; every kernel with --full).
    #[arg(long, value_name = "N", value_parser = numbers::positive_count)]
    pub top: Option<usize>,
    /// Only the tokens numbered A to B-1 in the --trace file (e.g. 10..12),
    /// so a long run's trace stays small enough to open.
    #[arg(long, value_name = "A..B", value_parser = token_window, requires = "trace")]
    pub trace_tokens: Option<Range<u32>>,
}

impl ReportFlags {
    /// What the text report shows.
    pub fn options(&self) -> ReportOptions {
        let base = if self.full {
            ReportOptions::FULL
        } else {
            ReportOptions::SHORT
        };
        ReportOptions {
            top_kernels: self.top.or(base.top_kernels),
            ..base
        }
    }
}

/// `A..B` with A < B, whole numbers.
pub(crate) fn token_window(text: &str) -> Result<Range<u32>, String> {
    let problem =
        || format!("`{text}` is not a token window: expected A..B with whole numbers A < B, e.g. 10..12");
    let (start, end) = text.trim().split_once("..").ok_or_else(problem)?;
    let start: u32 = start.trim().parse().map_err(|_| problem())?;
    let end: u32 = end.trim().parse().map_err(|_| problem())?;
    if start >= end {
        return Err(problem());
    }
    Ok(start..end)
}

/// Refuses a trace window (`--trace-tokens`) that holds none of the
/// profile's tokens, naming the tokens there are.
pub fn check_trace_window(profile: &Profile, window: Option<&Range<u32>>) -> Result<()> {
    if let Some(window) = window {
        let tokens: Vec<u32> = profile.tokens.iter().map(|token| token.index).collect();
        if !tokens.iter().any(|token| window.contains(token)) {
            match (tokens.iter().min(), tokens.iter().max()) {
                (Some(first), Some(last)) => bail!(
                    "--trace-tokens {}..{}: the profile has tokens {first}..{}",
                    window.start,
                    window.end,
                    last + 1
                ),
                _ => bail!(
                    "--trace-tokens {}..{}: the profile marked no tokens",
                    window.start,
                    window.end
                ),
            }
        }
    }
    Ok(())
}

/// Arguments of `kscope report`.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A JSON profile (written by `kscope run --profile-json`).
    pub profile: PathBuf,
    /// Also write the report as one self-contained HTML page to FILE
    /// (charts and tables; opens offline in any browser).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write a Chrome trace (Perfetto, chrome://tracing) of the profile to FILE.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    #[command(flatten)]
    pub shape: ReportFlags,
    /// Overwrite --html and --trace files that exist.
    #[arg(long)]
    pub force: bool,
}

pub fn run(args: ReportArgs) -> Result<ExitCode> {
    let html = args
        .html
        .as_deref()
        .map(|path| OutputFile::check(path, "--html", args.force, None))
        .transpose()?;
    let trace = args
        .trace
        .as_deref()
        .map(|path| OutputFile::check(path, "--trace", args.force, None))
        .transpose()?;
    if let (Some(html), Some(trace)) = (&html, &trace)
        && std::path::absolute(html.path()).ok() == std::path::absolute(trace.path()).ok()
    {
        bail!("--html and --trace must name different files");
    }
    let input = std::fs::canonicalize(&args.profile).ok();
    for file in [&html, &trace].into_iter().flatten() {
        if input.is_some() && std::fs::canonicalize(file.path()).ok() == input {
            bail!(
                "{}: the profile being read; write the output elsewhere",
                file.path().display()
            );
        }
    }
    let profile = Profile::load(&args.profile)?;
    print!("{}", render_report_with(&profile, args.shape.options()));
    write_trace_and_page(&profile, trace.as_ref(), html.as_ref(), &args.shape)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the Chrome trace (the window of `shape`) and the HTML page of
/// `profile` to the files given, saying where each went.
pub fn write_trace_and_page(
    profile: &Profile,
    trace: Option<&OutputFile>,
    html: Option<&OutputFile>,
    shape: &ReportFlags,
) -> Result<()> {
    if let Some(file) = trace {
        check_trace_window(profile, shape.trace_tokens.as_ref())?;
        let window = shape.trace_tokens.clone();
        file.write_with(|writer| write_chrome_trace(profile, window, writer))?;
        println!(
            "trace written to {} (open in https://ui.perfetto.dev)",
            file.path().display()
        );
    }
    if let Some(file) = html {
        file.write(render_html(profile).as_bytes())?;
        println!("report written to {}", file.path().display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_windows_parse_and_refuse_nonsense() {
        assert_eq!(token_window("10..12").unwrap(), 10..12);
        assert_eq!(token_window(" 0 .. 1 ").unwrap(), 0..1);
        for bad in ["12..10", "5..5", "a..b", "10", "-1..3", "..3"] {
            assert!(token_window(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn top_and_full_shape_the_options() {
        let flags = |full, top| ReportFlags {
            full,
            top,
            trace_tokens: None,
        };
        assert_eq!(flags(false, None).options(), ReportOptions::SHORT);
        assert_eq!(flags(true, None).options(), ReportOptions::FULL);
        assert_eq!(flags(false, Some(3)).options().top_kernels, Some(3));
        let full_top = flags(true, Some(4)).options();
        assert!(full_top.full);
        assert_eq!(full_top.top_kernels, Some(4));
    }
}
