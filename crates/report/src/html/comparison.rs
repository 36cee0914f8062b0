//! Two profiles and their comparison as one page: the verdict, every
//! compared row coloured by its verdict, the per-layer changes as a chart,
//! then each run's views side by side on shared scales (layer bars of one
//! height, rooflines of one extent), so the two compare by position.

use std::fmt::Write;

use kernelscope::profile::{Comparison, Profile};

use super::deltas::{delta_chart, verdict_class};
use super::layers::layer_bars;
use super::markup::escape;
use super::page::{PERFETTO, page};
use super::roofline::{RooflineRange, roofline_marks};
use super::run::{SharedScales, conditions, headline, views};
use crate::summary::Summary;
use crate::tables::{COMPARISON_COLUMNS, comparison_cells};

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
    verdict(&mut body, comparison);
    body.push_str("<h2>Per-layer change</h2>");
    delta_chart(&mut body, &comparison.rows);
    body.push_str("<h2>Every compared row</h2>");
    rows(&mut body, comparison);
    let runs = [
        (names.0, base, Summary::of(base)),
        (names.1, new, Summary::of(new)),
    ];
    let scales = shared_scales(&runs);
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

/// The one-line verdict, then the notes.
fn verdict(out: &mut String, comparison: &Comparison) {
    let regressions = comparison.regressions();
    let _ = write!(
        out,
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
        out.push_str(r#"<ul class="warnings">"#);
        for note in &comparison.notes {
            let _ = write!(out, "<li>note: {}</li>", escape(note));
        }
        out.push_str("</ul>");
    }
}

/// Every compared row, each coloured by its verdict.
fn rows(out: &mut String, comparison: &Comparison) {
    out.push_str(r#"<table class="numbers comparison"><thead><tr>"#);
    for column in COMPARISON_COLUMNS {
        let _ = write!(out, "<th>{column}</th>");
    }
    out.push_str("</tr></thead><tbody>");
    for row in &comparison.rows {
        let _ = write!(out, r#"<tr class="{}">"#, verdict_class(row.verdict));
        for cell in comparison_cells(row) {
            let _ = write!(out, "<td>{}</td>", escape(&cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
}

/// The scales that fit both runs: the taller layer bar, the roofline
/// extent that covers both (or the one that can be drawn).
fn shared_scales(runs: &[(&str, &Profile, Summary<'_>); 2]) -> SharedScales {
    let layer_ns = runs
        .iter()
        .flat_map(|(_, profile, summary)| layer_bars(summary, profile.repetition_tokens().len()))
        .map(|bar| bar.total_ns)
        .fold(0.0, f64::max);
    let range = |(_, _, summary): &(&str, &Profile, Summary<'_>)| {
        let (kernels, ops) = roofline_marks(summary);
        RooflineRange::of(&kernels, &ops, summary.roofline)
    };
    let roofline = match (range(&runs[0]), range(&runs[1])) {
        (Some(a), Some(b)) => Some(a.union(b)),
        (a, b) => a.or(b),
    };
    SharedScales {
        layer_ns: Some(layer_ns),
        roofline,
    }
}
