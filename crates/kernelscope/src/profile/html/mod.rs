//! The report as one self-contained HTML page: inline SVG charts (roofline,
//! per-layer bars, per-token timeline), the tables of the text report, and
//! for two runs the comparison with its verdicts coloured, both runs' views
//! side by side. No network and no files beside it: the styles and the
//! little script are in the page, and a content security policy forbids it
//! any request, so it opens the same offline, from a mail or an archive.

mod charts;

use std::fmt::Write;

use super::report::{SUMMARY_COLUMNS, Summary, counter_table};
use super::session::submission_table;
use super::{Comparison, Phase, Profile, ReportOptions, Verdict, cross_check, render_report_with};

const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");

/// `text` with the characters HTML gives meaning to escaped (for element
/// text and quoted attributes alike).
pub(crate) fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            '\n' => escaped.push_str("&#10;"),
            other => escaped.push(other),
        }
    }
    escaped
}

fn page(title: &str, body: &str) -> String {
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{}</title>
<script>{SCRIPT}</script>
<style>{STYLE}</style>
</head>
<body>
<ul id="page-errors"></ul>
{body}
</body>
</html>
"#,
        escape(title)
    )
}

fn table(out: &mut String, class: &str, header: &[&str], rows: &[Vec<String>]) {
    let _ = write!(out, r#"<table class="{class}"><thead><tr>"#);
    for cell in header {
        let _ = write!(out, "<th>{}</th>", escape(cell));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{}</td>", escape(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
}

/// The conditions as a two-column table.
fn conditions(out: &mut String, profile: &Profile) {
    let conditions = &profile.conditions;
    let mut rows = vec![
        vec!["tool".to_string(), profile.tool.clone()],
        vec!["device".to_string(), conditions.device.clone()],
        vec!["backend".to_string(), conditions.backend.clone()],
        vec![
            "driver".to_string(),
            conditions.driver.clone().unwrap_or_else(|| "-".to_string()),
        ],
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
        vec![
            "model".to_string(),
            conditions.model.clone().unwrap_or_else(|| "-".to_string()),
        ],
        vec![
            "peak bandwidth".to_string(),
            conditions
                .peak_bandwidth_gbps
                .map_or("unknown".to_string(), |peak| {
                    format!("{peak:.1} GB/s (copy probe)")
                }),
        ],
        vec![
            "peak compute".to_string(),
            conditions
                .peak_compute_gflops
                .map_or("unknown".to_string(), |peak| {
                    format!("{peak:.1} GFLOP/s (GEMM probe)")
                }),
        ],
    ];
    if let Some(topology) = &conditions.topology {
        rows.push(vec!["split".to_string(), topology.describe()]);
    }
    table(out, "conditions", &["condition", "value"], &rows);
}

/// Tokens, the decode rate, the cross-check and the warnings: what to read first.
fn headline(out: &mut String, profile: &Profile) {
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
                r#"<li class="{class}">cross-check <b>{}</b>: dispatch sum {:.3} ms vs submission {:.3} ms over {} submissions, drift {:+.1}% ({})</li>"#,
                escape(&check.label),
                check.dispatch_sum_ns as f64 / 1e6,
                check.submission_ns as f64 / 1e6,
                check.submissions,
                check.drift * 100.0,
                if check.flagged {
                    "FLAGGED: a measurement bug or idle gaps"
                } else {
                    "ok"
                }
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

/// Two profiles' charts on common scales, so they compare by position: the
/// layer bars' height and the roofline's extent.
#[derive(Clone, Copy, Default)]
struct SharedScales {
    layer_ns: Option<f64>,
    roofline: Option<charts::RooflineRange>,
}

/// The roofline extent of a summary of a run under `conditions`.
fn roofline_range(summary: &Summary<'_>, conditions: &super::Conditions) -> Option<charts::RooflineRange> {
    let (kernels, ops) = charts::roofline_marks(summary);
    charts::RooflineRange::of(
        &kernels,
        &ops,
        conditions.peak_bandwidth_gbps,
        conditions.peak_compute_gflops,
    )
}

/// The views of one profile: charts, then tables, on `scales` where given.
fn views(out: &mut String, profile: &Profile, summary: &Summary<'_>, scales: SharedScales) {
    let repetitions = profile.repetition_tokens().len();
    let peak_gbps = profile.conditions.peak_bandwidth_gbps;
    let peak_gflops = profile.conditions.peak_compute_gflops;
    out.push_str(r#"<section class="view">"#);
    let _ = write!(
        out,
        r#"<h2>Roofline</h2><p class="note">Every kernel over {} as a circle (area: share of the time; hover for its figures) at its declared flops per byte and achieved GFLOP/s, under the measured bandwidth ceiling (red) and compute ceiling (dark). <label><input type="checkbox" class="show-ops"> show op kinds (squares)</label></p>"#,
        escape(&summary.over)
    );
    let (kernels, ops) = charts::roofline_marks(summary);
    charts::roofline(out, &kernels, &ops, peak_gbps, peak_gflops, scales.roofline);

    out.push_str(r#"<h2>Per layer</h2><p class="note">Time per token of each layer by op kind; identical layers give identical bars, and a layer that differs from the layers doing the same work by more than the noise is outlined in red and marked *.</p>"#);
    let bars = charts::layer_bars(summary, repetitions);
    charts::layer_chart(out, &bars, scales.layer_ns);

    out.push_str(r#"<h2>Per token</h2><p class="note">Each token's host wall time: the device busy in its submissions, the rest idle, the host's enqueue time as a red tick.</p>"#);
    charts::token_timeline(out, profile);

    if !summary.records.is_empty() {
        let op_of = |record: &super::DispatchRecord| record.op_kind.name().to_string();
        let kernel_of = |record: &super::DispatchRecord| record.kernel.to_string();
        let mut header = vec!["op"];
        header.extend(SUMMARY_COLUMNS);
        let by_total = |mut rows: Vec<super::aggregate::Aggregate>| {
            rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.key.cmp(&b.key)));
            rows
        };
        let records = || summary.records.iter().copied();
        let _ = write!(out, "<h2>Per op, over {}</h2>", escape(&summary.over));
        let ops = by_total(super::aggregate::aggregate(records(), op_of));
        table(out, "numbers", &header, &summary.cells(&ops, op_of));
        header[0] = "kernel";
        let _ = write!(out, "<h2>Per kernel, over {}</h2>", escape(&summary.over));
        let kernels = by_total(super::aggregate::aggregate(records(), kernel_of));
        table(out, "numbers", &header, &summary.cells(&kernels, kernel_of));
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
        table(
            out,
            "numbers",
            &[
                "label",
                "count",
                "total ms",
                "p50 µs",
                "p95 µs",
                "max µs",
                "host enqueue µs (mean)",
            ],
            &rows,
        );
    }

    out.push_str("<h2>Counters</h2>");
    let (header, rows) = counter_table(profile);
    table(out, "numbers", &header, &rows);
    out.push_str("</section>");
}

const PERFETTO: &str = r#"<h2>Trace</h2><p class="note">For the timeline of every dispatch, write a Chrome trace with <code>kscope run --trace FILE</code> (or <code>kscope report PROFILE --trace FILE</code>; <code>--trace-tokens 10..12</code> keeps a long run's trace small) and open it at <a href="https://ui.perfetto.dev">ui.perfetto.dev</a> (Open trace file: it is read in the browser, not uploaded) or in <code>chrome://tracing</code>.</p>"#;

/// `profile` as one self-contained HTML page.
pub fn render_html(profile: &Profile) -> String {
    let mut body = String::new();
    let title = format!(
        "kernelscope profile: {}",
        profile
            .conditions
            .model
            .as_deref()
            .unwrap_or(&profile.conditions.device)
    );
    let _ = write!(body, "<h1>{}</h1>", escape(&title));
    headline(&mut body, profile);
    conditions(&mut body, profile);
    views(&mut body, profile, &Summary::of(profile), SharedScales::default());
    body.push_str(PERFETTO);
    let _ = write!(
        body,
        r#"<details><summary>The full text report</summary><pre>{}</pre></details>"#,
        escape(&render_report_with(profile, ReportOptions::FULL))
    );
    page(&title, &body)
}

fn verdict_class(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Same => "verdict-same",
        Verdict::Improved => "verdict-improved",
        Verdict::Regressed => "verdict-regressed",
        Verdict::Added => "verdict-added",
        Verdict::Removed => "verdict-removed",
    }
}

/// Two profiles and their comparison as one self-contained HTML page: the
/// verdict, every compared row coloured by its verdict, the per-layer
/// changes as a chart, then each run's views side by side (layer charts on
/// one scale). `names` label the two runs (their file names).
pub fn render_comparison_html(
    base: &Profile,
    new: &Profile,
    comparison: &Comparison,
    names: (&str, &str),
) -> String {
    let mut body = String::new();
    let title = format!("kernelscope comparison: {} vs {}", names.0, names.1);
    let _ = write!(body, "<h1>{}</h1>", escape(&title));
    let regressions = comparison
        .rows
        .iter()
        .filter(|row| row.verdict == Verdict::Regressed)
        .count();
    let _ = write!(
        body,
        r#"<p class="headline {}">{}</p>"#,
        if regressions > 0 {
            "verdict-regressed"
        } else {
            "verdict-same"
        },
        if regressions > 0 {
            format!(
                "REGRESSION in {regressions} rows (threshold {:.1}%)",
                comparison.threshold * 100.0
            )
        } else {
            format!("no regression (threshold {:.1}%)", comparison.threshold * 100.0)
        }
    );
    if !comparison.notes.is_empty() {
        body.push_str(r#"<ul class="warnings">"#);
        for note in &comparison.notes {
            let _ = write!(body, "<li>note: {}</li>", escape(note));
        }
        body.push_str("</ul>");
    }
    body.push_str("<h2>Per-layer change</h2>");
    charts::delta_chart(&mut body, &comparison.rows);
    body.push_str("<h2>Every compared row</h2>");
    body.push_str(r#"<table class="numbers comparison"><thead><tr><th>section</th><th>what</th><th>base</th><th>new</th><th>change</th><th>noise</th><th>verdict</th></tr></thead><tbody>"#);
    for row in &comparison.rows {
        let _ = write!(body, r#"<tr class="{}">"#, verdict_class(row.verdict));
        for cell in row.cells() {
            let _ = write!(body, "<td>{}</td>", escape(&cell));
        }
        body.push_str("</tr>");
    }
    body.push_str("</tbody></table>");
    let runs = [
        (names.0, base, Summary::of(base)),
        (names.1, new, Summary::of(new)),
    ];
    let scale = runs
        .iter()
        .flat_map(|(_, profile, summary)| charts::layer_bars(summary, profile.repetition_tokens().len()))
        .map(|bar| bar.total_ns)
        .fold(0.0, f64::max);
    let range =
        |(_, profile, summary): &(&str, &Profile, Summary<'_>)| roofline_range(summary, &profile.conditions);
    let roofline = match (range(&runs[0]), range(&runs[1])) {
        (Some(a), Some(b)) => Some(a.union(b)),
        (a, b) => a.or(b),
    };
    let scales = SharedScales {
        layer_ns: Some(scale),
        roofline,
    };
    body.push_str(r#"<div class="side-by-side">"#);
    for (name, profile, summary) in &runs {
        let _ = write!(body, r#"<div class="run"><h1>{}</h1>"#, escape(name));
        headline(&mut body, profile);
        conditions(&mut body, profile);
        views(&mut body, profile, summary, scales);
        body.push_str("</div>");
    }
    body.push_str("</div>");
    body.push_str(PERFETTO);
    page(&title, &body)
}
