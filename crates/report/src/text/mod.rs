//! The text report: per token, per layer and scope, per op and kernel, the
//! submission table, counters per token, the experts of a mixture-of-experts
//! run, the ranks of a split run and the cross-check. In the spirit of an inference engine's `--profile` report,
//! with achieved bandwidth and FLOP/s from what each dispatch declares it
//! moves, and where each group sits on the device's roofline (memory- or
//! compute-bound, and how close to that peak). Also the comparison of two
//! profiles as a table.

mod comparison;
mod dispatches;
mod experts;
mod folds;
mod gap;
mod idle;
mod options;
mod ranks;
pub(crate) mod submissions;
mod table;
mod tokens;

use std::collections::HashMap;
use std::fmt::Write;

use kernelscope::profile::{BandwidthBasis, Ceilings, Profile, fold_inputs, layer_of};

pub use comparison::render_comparison;
pub use gap::render_gap_account;
pub use options::ReportOptions;

use crate::summary::Summary;
use crate::tables::counter_table;

/// Renders `profile` as the full text report (every layer, scope and
/// kernel on its own row); see [`render_report_with`] for the short one.
pub fn render_report(profile: &Profile) -> String {
    render_report_with(profile, ReportOptions::FULL)
}

/// Renders `profile` as the text report, as `options` say.
pub fn render_report_with(profile: &Profile, options: ReportOptions) -> String {
    let mut out = String::new();
    render_conditions(profile, &mut out);
    let dispatch_times = !profile.dispatches.is_empty();
    let conditions = &profile.conditions;
    if !dispatch_times && conditions.profiling.times_dispatches() {
        let _ = writeln!(
            out,
            "\nper-dispatch timing: {} — per-op and per-layer rows are not available; submission times below are",
            conditions.dispatch_timing.describe()
        );
    }

    // The dispatches summarised and, in the short report, the folds of their
    // layers: made once, for the token lines and the tables alike.
    let summary = Summary::of(profile);
    let layer_labels = if options.full {
        HashMap::new()
    } else {
        folds::fold_labels(&fold_inputs(summary.records.iter().copied(), |record| {
            layer_of(&record.scope)
        }))
    };
    tokens::render_tokens(profile, &layer_labels, &mut out);
    if dispatch_times {
        dispatches::render_dispatch_summary(&summary, &layer_labels, options, &mut out);
    }
    experts::render_experts(profile, options, &mut out);
    submissions::render_submissions(profile, &mut out);
    idle::render_idle(profile, options.full, &mut out);
    render_counters(profile, &mut out);
    ranks::render_ranks(profile, options, &mut out);
    submissions::render_cross_check(profile, &mut out);
    for warning in &profile.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    out
}

/// The lines that say what was measured, where and how.
fn render_conditions(profile: &Profile, out: &mut String) {
    let conditions = &profile.conditions;
    let _ = writeln!(out, "kernelscope profile ({})", profile.tool);
    let driver = conditions
        .driver
        .as_deref()
        .map_or_else(String::new, |driver| format!(" | driver: {driver}"));
    let _ = writeln!(
        out,
        "device: {}{driver} | backend: {} | mode: {} | profiling: {}",
        conditions.device, conditions.backend, conditions.mode, conditions.profiling
    );
    let _ = writeln!(
        out,
        "timing: submissions by {}, dispatches {}",
        conditions.submission_timing,
        conditions.dispatch_timing.describe()
    );
    if let Some(model) = &conditions.model {
        let _ = writeln!(out, "model: {model}");
    }
    if let Some(program) = &conditions.program {
        let _ = writeln!(out, "program: {} ({})", program.command.join(" "), program.ended);
        let _ = writeln!(
            out,
            "steps (the tokens below): {} | processes with device work: {}",
            program.steps, program.processes
        );
    }
    let recorded = [
        ("weights", &conditions.weight_format),
        ("shape", &conditions.model_shape),
        ("cpu kernels", &conditions.cpu_kernels),
    ]
    .into_iter()
    .filter_map(|(name, value)| Some(format!("{name}: {}", value.as_ref()?)))
    .collect::<Vec<_>>();
    if !recorded.is_empty() {
        let _ = writeln!(out, "{}", recorded.join(" | "));
    }
    if let Some(bytes) = &conditions.bytes_measured {
        let _ = writeln!(out, "bytes: {bytes}");
    }
    let _ = writeln!(out, "{}", describe_roofline(&conditions.ceilings));
}

/// The ceilings the roofline is drawn at, on one line, then each ceiling
/// with how it was measured on a line of its own; or what is unknown and
/// what that leaves unclassified.
fn describe_roofline(ceilings: &Ceilings) -> String {
    let memory = match ceilings.bandwidth() {
        Some((gbps, BandwidthBasis::Read)) => {
            let write = ceilings
                .write
                .as_ref()
                .map_or_else(String::new, |write| format!(", write {:.1} GB/s", write.value));
            format!("memory: read {gbps:.1} GB/s{write}")
        }
        Some((gbps, BandwidthBasis::Copy)) => format!(
            "memory: copy {gbps:.1} GB/s (bytes read + written; profiles before schema 3 measured no read ceiling)"
        ),
        None => "memory ceiling unknown (bandwidth probes not run)".to_string(),
    };
    let compute = ceilings.compute_gflops().map_or_else(
        || "compute ceiling unknown (compute probe not run)".to_string(),
        |gflops| format!("compute {gflops:.1} GFLOP/s"),
    );
    let ridge = match ceilings.ridge_point() {
        Some(ridge) => format!("ridge point {ridge:.2} FLOP/B"),
        None => "no ridge point, so work with both bytes and flops is not classified".to_string(),
    };
    let mut text = format!("roofline: {memory}; {compute}; {ridge}");
    for (name, unit, ceiling) in ceilings.each() {
        let _ = write!(
            text,
            "\n  {} ceiling {:.1} {unit}: {}",
            name.replace('_', " "),
            ceiling.value,
            ceiling.method
        );
    }
    text
}

fn render_counters(profile: &Profile, out: &mut String) {
    let (header, rows) = counter_table(profile);
    let _ = writeln!(out, "\ncounters:");
    let _ = writeln!(out, "{}", table::table(&header, rows));
}
