//! The per-layer changes of a comparison: a bar per layer of its relative
//! change (right: slower), coloured by its verdict, and the class that
//! colours a comparison row by its verdict wherever the page shows one.

use std::fmt::Write;

use kernelscope::profile::{ComparisonRow, Verdict};

use super::markup::escape;
use super::svg::Frame;

/// The page's class for rows and bars of `verdict` (page.css colours it).
pub(super) fn verdict_class(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Same => "verdict-same",
        Verdict::Improved => "verdict-improved",
        Verdict::Regressed => "verdict-regressed",
        Verdict::Added => "verdict-added",
        Verdict::Removed => "verdict-removed",
    }
}

/// The fill of a change bar of `verdict`.
fn verdict_colour(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Regressed => "#d62728",
        Verdict::Improved => "#2ca02c",
        Verdict::Same => "#9e9e9e",
        Verdict::Added | Verdict::Removed => "#1f77b4",
    }
}

/// The height of one layer's row.
const ROW_HEIGHT: f64 = 16.0;

/// The per-layer rows of a comparison as bars of their relative change
/// (right: slower), coloured by verdict, the widest change at the edges.
pub(super) fn delta_chart(out: &mut String, rows: &[ComparisonRow]) {
    let layers: Vec<&ComparisonRow> = rows.iter().filter(|row| row.section == "layer").collect();
    if layers.is_empty() {
        out.push_str(r#"<p class="empty">No per-layer times to compare.</p>"#);
        return;
    }
    let widest = layers
        .iter()
        .filter_map(|row| row.change)
        .map(f64::abs)
        .filter(|change| change.is_finite())
        .fold(0.01, f64::max);
    let frame = Frame {
        width: 760.0,
        height: 34.0 + ROW_HEIGHT * layers.len() as f64,
        left: 170.0,
        right: 90.0,
        top: 8.0,
        bottom: 26.0,
    };
    frame.open(out, "deltas", "per-layer change between the two runs");
    let middle = frame.left + frame.plot_width() / 2.0;
    let _ = write!(
        out,
        r##"<line x1="{middle:.1}" y1="{:.1}" x2="{middle:.1}" y2="{:.1}" stroke="#888"/><text x="{:.1}" y="{:.1}" class="tick" text-anchor="start">faster ←</text><text x="{:.1}" y="{:.1}" class="tick" text-anchor="end">→ slower (±{:.1}% at the edges)</text>"##,
        frame.top,
        frame.height - frame.bottom,
        frame.left + 2.0,
        frame.height - 8.0,
        frame.width - frame.right,
        frame.height - 8.0,
        100.0 * widest
    );
    for (position, row) in layers.iter().enumerate() {
        let top = frame.top + ROW_HEIGHT * position as f64 + 2.0;
        delta_bar(out, &frame, row, top, widest);
    }
    out.push_str("</svg>");
}

/// One layer's bar at `top`, from the middle by its change over `widest`.
fn delta_bar(out: &mut String, frame: &Frame, row: &ComparisonRow, top: f64, widest: f64) {
    let (class, colour) = (verdict_class(row.verdict), verdict_colour(row.verdict));
    let middle = frame.left + frame.plot_width() / 2.0;
    let change = row.change.filter(|change| change.is_finite()).unwrap_or(0.0);
    let length = (change / widest).clamp(-1.0, 1.0) * frame.plot_width() / 2.0;
    let (x, width) = if length < 0.0 {
        (middle + length, -length)
    } else {
        (middle, length)
    };
    let text = match row.change {
        Some(change) => format!("{:+.1}%", change * 100.0),
        None => row.verdict.name().to_string(),
    };
    let _ = write!(
        out,
        r##"<g class="delta-bar {class}" data-layer="{}"><text x="{:.1}" y="{:.1}" class="label" text-anchor="end">{}</text><rect x="{x:.1}" y="{top:.1}" width="{width:.1}" height="{:.1}" fill="{colour}"/><text x="{:.1}" y="{:.1}" class="label">{text} {}</text><title>{}: {} → {} µs per token, {text}, noise {:.1} µs: {}</title></g>"##,
        escape(&row.key),
        frame.left - 6.0,
        top + 10.0,
        escape(&row.key),
        ROW_HEIGHT - 4.0,
        frame.width - frame.right + 4.0,
        top + 10.0,
        row.verdict.name(),
        escape(&row.key),
        row.base
            .map_or("-".to_string(), |value| format!("{:.1}", value / 1e3)),
        row.new
            .map_or("-".to_string(), |value| format!("{:.1}", value / 1e3)),
        row.noise / 1e3,
        row.verdict.name()
    );
}
