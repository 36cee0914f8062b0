//! The ranks of a split run on the page: a chart of every step with one
//! stacked bar per rank (compute, communication, idle on its device; the
//! step's slowest rank outlined), then the text report's tables of the
//! ranks' steps. Nothing for a run on one device.

use std::fmt::Write;

use kernelscope::profile::{Profile, RankStep, rank_steps};

use super::markup::{escape, table};
use super::svg::Frame;
use crate::rank_steps::{RANK_STEPS_NOTE, each_step, imbalance_line, rank_means};

/// Compute, communication and idle: the bars' colours, bottom up.
const PARTS: [(&str, &str); 3] = [
    ("compute", "#4e79a7"),
    ("communication", "#f28e2b"),
    ("idle", "#d9d9d9"),
];

/// The section of a split run's ranks, or nothing.
pub(super) fn rank_section(out: &mut String, profile: &Profile) {
    let Some(topology) = &profile.conditions.topology else {
        return;
    };
    let _ = write!(
        out,
        "<h2>Ranks</h2><p class=\"note\">{}.</p>",
        escape(&topology.describe())
    );
    let (steps, note) = rank_steps(profile);
    if let Some(note) = note {
        let _ = write!(out, r#"<p class="warning">{}</p>"#, escape(&note));
    }
    let Some(imbalance) = imbalance_line(&steps) else {
        out.push_str(r#"<p class="empty">No timed step on every rank.</p>"#);
        return;
    };
    let _ = write!(
        out,
        "<p class=\"note\">Each step, one bar per rank: {RANK_STEPS_NOTE}. The slowest rank's bar is outlined.</p>"
    );
    step_chart(out, &steps);
    let (header, rows) = rank_means(&steps);
    table(out, "numbers ranks", &header, &rows);
    let _ = write!(out, "<p class=\"note\">{}</p>", escape(&imbalance));
    let (header, rows) = each_step(&steps);
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    out.push_str("<details><summary>Every step</summary>");
    table(out, "numbers", &header, &rows);
    out.push_str("</details>");
}

/// One group of bars per step, a bar per rank, its height the rank's span.
fn step_chart(out: &mut String, steps: &[RankStep]) {
    let ranks = steps[0].ranks.len();
    let group = (1100.0 / steps.len() as f64).clamp(2.0 * ranks as f64, 12.0 * ranks as f64 + 6.0);
    let frame = Frame {
        width: 70.0 + 20.0 + group * steps.len() as f64,
        height: 240.0,
        left: 70.0,
        right: 20.0,
        top: 16.0,
        bottom: 40.0,
    };
    let highest = steps
        .iter()
        .flat_map(|step| step.ranks.iter().map(|time| time.span_ns))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    frame.open(
        out,
        "rank-steps",
        "per step and rank: compute, communication, idle",
    );
    frame.value_axis(
        out,
        [0.0, 0.5, 1.0].map(|fraction| (fraction, format!("{:.1}", highest * fraction / 1e3))),
        "µs per step",
    );
    let _ = write!(
        out,
        r#"<text x="{:.1}" y="{:.1}" class="axis" text-anchor="middle">step (a bar per rank)</text>"#,
        frame.left + frame.plot_width() / 2.0,
        frame.height - 6.0
    );
    let base = frame.top + frame.plot_height();
    let width = (group - 4.0) / ranks as f64;
    for (position, step) in steps.iter().enumerate() {
        let slowest = step.slowest_rank();
        for (rank, time) in step.ranks.iter().enumerate() {
            let left = frame.left + group * position as f64 + 2.0 + width * rank as f64;
            let _ = write!(
                out,
                r#"<g class="rank-bar" data-step="{}" data-rank="{rank}">"#,
                step.position
            );
            let mut top = base;
            for ((_, colour), ns) in PARTS.iter().zip(time.parts()) {
                let height = ns as f64 / highest * frame.plot_height();
                top -= height;
                let _ = write!(
                    out,
                    r#"<rect x="{left:.1}" y="{top:.1}" width="{:.1}" height="{height:.1}" fill="{colour}"/>"#,
                    (width * 0.9).max(0.6)
                );
            }
            if rank == slowest && ranks > 1 {
                let _ = write!(
                    out,
                    r##"<rect class="slowest" x="{left:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#e15759"/>"##,
                    (width * 0.9).max(0.6),
                    base - top
                );
            }
            let _ = write!(
                out,
                "<title>step {}, rank {rank}{}: compute {:.1} µs, communication {:.1} µs, idle {:.1} µs</title></g>",
                step.position,
                if rank == slowest { " (slowest)" } else { "" },
                time.compute_ns as f64 / 1e3,
                time.communication_ns as f64 / 1e3,
                time.idle_ns as f64 / 1e3
            );
        }
    }
    out.push_str("</svg>");
    out.push_str(r#"<p class="legend">"#);
    for (name, colour) in PARTS {
        let _ = write!(out, r#"<span><i style="background:{colour}"></i>{name}</span> "#);
    }
    out.push_str(r#"<span><i style="border:1px solid #e15759"></i>the step's slowest rank</span></p>"#);
}
