//! The sections of one run on the page: its headline (tokens, decode rate,
//! cross-check, warnings), its conditions, and its views (the charts, then
//! the tables of the text report). A comparison shows two of them side by
//! side, on shared scales.

use std::fmt::Write;

use kernelscope::profile::{Phase, Profile, cross_check, submission_table};

use super::layers::{layer_bars, layer_chart};
use super::markup::{escape, table};
use super::roofline::{RooflineRange, roofline, roofline_marks};
use super::timeline::token_timeline;
use crate::formats::{FORMAT_HEADING, format_of, reads_block_formats};
use crate::in_kernel::{IN_KERNEL_NOTE, PHASE_COLUMNS, PHASE_NOTE, has_phases, phase_cells};
use crate::summary::{Summary, kernel_of, op_of};
use crate::tables::{SUMMARY_COLUMNS, counter_table, summary_cells};

/// Two profiles' charts on common scales, so they compare by position: the
/// layer bars' height and the roofline's extent. Each chart's own where
/// `None`.
#[derive(Clone, Copy, Default)]
pub(super) struct SharedScales {
    /// The time per token the layer bars' full height stands for.
    pub layer_ns: Option<f64>,
    /// The roofline chart's extent.
    pub roofline: Option<RooflineRange>,
}

/// The conditions as a two-column table.
pub(super) fn conditions(out: &mut String, profile: &Profile) {
    let conditions = &profile.conditions;
    let or_dash = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".to_string());
    let mut rows = vec![
        vec!["tool".to_string(), profile.tool.clone()],
        vec!["device".to_string(), conditions.device.clone()],
        vec!["backend".to_string(), conditions.backend.clone()],
        vec!["driver".to_string(), or_dash(&conditions.driver)],
        vec!["mode".to_string(), conditions.mode.clone()],
        vec!["profiling".to_string(), conditions.profiling.to_string()],
        vec![
            "submission timing".to_string(),
            conditions.submission_timing.to_string(),
        ],
        vec![
            "dispatch timing".to_string(),
            conditions.dispatch_timing.describe(),
        ],
        vec!["model".to_string(), or_dash(&conditions.model)],
    ];
    for (name, value) in [
        ("weight format", &conditions.weight_format),
        ("model shape", &conditions.model_shape),
    ] {
        if let Some(value) = value {
            rows.push(vec![name.to_string(), value.clone()]);
        }
    }
    if let Some(program) = &conditions.program {
        rows.push(vec!["program".into(), program.command.join(" ")]);
        rows.push(vec!["program ended".into(), program.ended.clone()]);
        rows.push(vec!["steps".into(), program.steps.clone()]);
        rows.push(vec!["processes".into(), program.processes.to_string()]);
    }
    rows.extend(conditions.ceilings.each().map(|(name, unit, ceiling)| {
        vec![
            format!("{} ceiling", name.replace('_', " ")),
            format!("{:.1} {unit} ({})", ceiling.value, ceiling.method),
        ]
    }));
    if conditions.ceilings.bandwidth().is_none() {
        rows.push(vec!["memory ceiling".to_string(), "unknown".to_string()]);
    }
    if conditions.ceilings.compute.is_none() {
        rows.push(vec!["compute ceiling".to_string(), "unknown".to_string()]);
    }
    if let Some(topology) = &conditions.topology {
        rows.push(vec!["split".to_string(), topology.describe()]);
    }
    table(out, "conditions", &["condition", "value"], &rows);
}

/// Tokens, the decode rate, the cross-check and the warnings: what to read first.
pub(super) fn headline(out: &mut String, profile: &Profile) {
    let count = |phase| profile.tokens.iter().filter(|token| token.phase == phase).count();
    let decode: Vec<u64> = profile
        .tokens
        .iter()
        .filter(|token| token.phase == Phase::Decode)
        .map(|token| token.duration_ns())
        .collect();
    let _ = write!(
        out,
        r#"<p class="headline">{} prefill and {} decode tokens"#,
        count(Phase::Prefill),
        count(Phase::Decode)
    );
    if !decode.is_empty() {
        let mean = decode.iter().fold(0u64, |sum, ns| sum.saturating_add(*ns)) as f64 / decode.len() as f64;
        if mean > 0.0 {
            let _ = write!(
                out,
                "; decode {:.3} ms per token, <b>{:.1} tokens/s</b> (host wall clock)",
                mean / 1e6,
                1e9 / mean
            );
        }
    }
    out.push_str(".</p>");
    let checks = cross_check(profile);
    if !checks.is_empty() {
        out.push_str(r#"<ul class="cross-check">"#);
        for check in checks {
            let class = if check.flagged { "flagged" } else { "ok" };
            let _ = write!(
                out,
                r#"<li class="{class}">{}</li>"#,
                escape(&crate::text::submissions::cross_check_line(&check))
            );
        }
        out.push_str("</ul>");
    }
    if !profile.warnings.is_empty() {
        out.push_str(r#"<ul class="warnings">"#);
        for warning in &profile.warnings {
            let _ = write!(out, "<li>warning: {}</li>", escape(warning));
        }
        out.push_str("</ul>");
    }
}

/// The views of one profile: charts, then tables, on `scales` where given.
pub(super) fn views(out: &mut String, profile: &Profile, summary: &Summary<'_>, scales: SharedScales) {
    out.push_str(r#"<section class="view">"#);
    charts(out, profile, summary, scales);
    tables(out, profile, summary);
    out.push_str("</section>");
}

/// The roofline, the per-layer bars, a mixture of experts' heatmaps, a
/// split run's ranks and the per-token timeline.
fn charts(out: &mut String, profile: &Profile, summary: &Summary<'_>, scales: SharedScales) {
    let _ = write!(
        out,
        r#"<h2>Roofline</h2><p class="note">Every kernel over {} as a circle (area: share of the time; colour: the format it declares it reads; hover for its figures) at its declared flops per byte and achieved GFLOP/s, under the measured memory ceiling (red: the read ceiling, or a profile's copy ceiling from before schema 3) and compute ceiling (dark). <label><input type="checkbox" class="show-ops"> show op kinds (squares)</label></p>"#,
        escape(&summary.over)
    );
    let (kernels, ops) = roofline_marks(summary);
    roofline(out, &kernels, &ops, summary.roofline, scales.roofline);

    out.push_str(r#"<h2>Per layer</h2><p class="note">Time per token of each layer by op kind; identical layers give identical bars, and a layer that differs from the layers doing the same work by more than the noise is outlined in red and marked *.</p>"#);
    let bars = layer_bars(summary, profile.repetition_tokens().len());
    layer_chart(out, &bars, scales.layer_ns);

    super::experts::expert_heatmaps(out, profile);
    super::ranks::rank_section(out, profile);

    out.push_str(r#"<h2>Per token</h2><p class="note">Each token's host wall time: the device busy in its submissions, the rest idle, the host's enqueue time as a red tick.</p>"#);
    token_timeline(out, profile);
}

/// The tables of the text report: per op, per kernel (and the phases of
/// kernels timed inside them), submissions, counters.
fn tables(out: &mut String, profile: &Profile, summary: &Summary<'_>) {
    if !summary.records.is_empty() {
        let mut header = vec!["op"];
        header.extend(SUMMARY_COLUMNS);
        let _ = write!(out, "<h2>Per op, over {}</h2>", escape(&summary.over));
        let ops = summary.heaviest_groups(op_of);
        table(out, "numbers", &header, &summary_cells(summary, &ops, op_of));
        header[0] = "kernel";
        let _ = write!(out, "<h2>Per kernel, over {}</h2>", escape(&summary.over));
        let kernels = summary.heaviest_groups(kernel_of);
        table(
            out,
            "numbers",
            &header,
            &summary_cells(summary, &kernels, kernel_of),
        );
        if has_phases(&summary.records) {
            let _ = write!(
                out,
                r#"<p class="note">{}</p><h2>Inside the kernels, over {}</h2>"#,
                escape(IN_KERNEL_NOTE),
                escape(&summary.over)
            );
            table(out, "numbers", &PHASE_COLUMNS, &phase_cells(&summary.records));
            let _ = write!(out, r#"<p class="note">{}</p>"#, escape(PHASE_NOTE));
        }
        if reads_block_formats(summary) {
            header[0] = "format";
            let _ = write!(
                out,
                "<h2>Per format, over {}</h2><p class=\"note\">{}</p>",
                escape(&summary.over),
                escape(FORMAT_HEADING)
            );
            let formats = summary.heaviest_groups(format_of);
            table(
                out,
                "numbers",
                &header,
                &summary_cells(summary, &formats, format_of),
            );
        }
    }

    let submissions = submission_table(&profile.submissions);
    if !submissions.is_empty() {
        out.push_str("<h2>Submissions by label</h2>");
        let rows: Vec<Vec<String>> = submissions
            .iter()
            .map(|row| {
                vec![
                    row.label.clone(),
                    row.count.to_string(),
                    format!("{:.3}", row.total_ns as f64 / 1e6),
                    format!("{:.1}", row.p50_ns as f64 / 1e3),
                    format!("{:.1}", row.p95_ns as f64 / 1e3),
                    format!("{:.1}", row.max_ns as f64 / 1e3),
                    format!(
                        "{:.1}",
                        row.host_enqueue_ns as f64 / 1e3 / row.count.max(1) as f64
                    ),
                ]
            })
            .collect();
        let header = [
            "label",
            "count",
            "total ms",
            "p50 µs",
            "p95 µs",
            "max µs",
            "host enqueue µs (mean)",
        ];
        table(out, "numbers", &header, &rows);
    }

    out.push_str("<h2>Counters</h2>");
    let (header, rows) = counter_table(profile);
    table(out, "numbers", &header, &rows);
}
