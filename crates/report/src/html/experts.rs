//! A mixture-of-experts run's heatmaps: sparse layers down, experts across,
//! each cell shaded by the rows routed to that expert (the first map) and by
//! its share of the layer's MLP time (the second: the layer's MLP time
//! split by routed rows). Hovering a cell gives its figures. Hot columns are
//! experts every token wants; a dark cell alone in a pale row is a layer's
//! imbalance.

use std::collections::HashMap;
use std::fmt::Write;

use kernelscope::profile::{ExpertRouting, Profile};

use super::markup::escape;
use super::svg::Frame;

/// The widest the plot area grows, and the narrowest and tallest a cell is.
const PLOT_WIDTH: f64 = 880.0;
const MIN_CELL_WIDTH: f64 = 3.0;
const MAX_CELL_HEIGHT: f64 = 14.0;
const MIN_CELL_HEIGHT: f64 = 3.0;

/// Both heatmaps, where the profile has routing.
pub(super) fn expert_heatmaps(out: &mut String, profile: &Profile) {
    let Some(routing) = &profile.experts else {
        return;
    };
    if routing.layers.is_empty() || routing.experts == 0 {
        return;
    }
    let _ = write!(
        out,
        r#"<h2>Experts</h2><p class="note">{} of {} experts per row in {} sparse layers: each cell is one layer's expert, darker for more rows routed to it (first map) and for more of its layer's MLP time (second map: the layer's time split by rows routed); hover for its figures.</p>"#,
        routing.per_token,
        routing.experts,
        routing.layers.len()
    );
    let rows: HashMap<(usize, usize), u64> = routing
        .layers
        .iter()
        .flat_map(|layer| {
            layer
                .tokens
                .iter()
                .enumerate()
                .map(move |(expert, &count)| ((layer.layer, expert), count))
        })
        .collect();
    let times: HashMap<(usize, usize), u64> = routing
        .apportioned_time(&profile.dispatches)
        .into_iter()
        .map(|(layer, expert, _, ns)| ((layer, expert), ns))
        .collect();
    heatmap(out, routing, "rows routed", &|layer, expert| {
        let count = rows.get(&(layer, expert)).copied().unwrap_or(0);
        (count as f64, format!("{count} rows"))
    });
    if !times.is_empty() {
        heatmap(out, routing, "MLP time", &|layer, expert| {
            let ns = times.get(&(layer, expert)).copied().unwrap_or(0);
            (
                ns as f64,
                format!("{:.3} ms of the layer's MLP time", ns as f64 / 1e6),
            )
        });
    }
}

/// One map: `value(layer, expert)` gives each cell's figure and its hover text.
fn heatmap(
    out: &mut String,
    routing: &ExpertRouting,
    title: &str,
    value: &dyn Fn(usize, usize) -> (f64, String),
) {
    let cell_width = (PLOT_WIDTH / routing.experts as f64).max(MIN_CELL_WIDTH);
    let cell_height = (600.0 / routing.layers.len() as f64).clamp(MIN_CELL_HEIGHT, MAX_CELL_HEIGHT);
    let frame = Frame {
        width: 70.0 + cell_width * routing.experts as f64 + 10.0,
        height: 30.0 + cell_height * routing.layers.len() as f64 + 26.0,
        left: 70.0,
        right: 10.0,
        top: 30.0,
        bottom: 26.0,
    };
    let largest = routing
        .layers
        .iter()
        .flat_map(|layer| (0..routing.experts).map(move |expert| value(layer.layer, expert).0))
        .fold(0.0f64, f64::max);
    frame.open(out, "experts", &format!("experts by {title}"));
    let _ = write!(
        out,
        r#"<text x="{:.1}" y="18" class="axis">{}: experts 0–{} across, sparse layers down (darkest: {})</text>"#,
        frame.left,
        escape(title),
        routing.experts - 1,
        escape(&value_label(title, largest))
    );
    for (row, layer) in routing.layers.iter().enumerate() {
        let y = frame.top + row as f64 * cell_height;
        // Every row labeled where rows are tall enough, else every 8th.
        if cell_height >= 10.0 || row == 0 || row + 1 == routing.layers.len() || row % 8 == 0 {
            let _ = write!(
                out,
                r#"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="end">layer.{}</text>"#,
                frame.left - 4.0,
                y + cell_height.min(10.0),
                layer.layer
            );
        }
        for expert in 0..routing.experts {
            let (figure, hover) = value(layer.layer, expert);
            let shade = if largest > 0.0 { figure / largest } else { 0.0 };
            // White to a deep blue: 0 rows stays white, the largest is darkest.
            let (red, green, blue) = (255.0 - 225.0 * shade, 255.0 - 175.0 * shade, 255.0 - 95.0 * shade);
            let _ = write!(
                out,
                r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="rgb({red:.0},{green:.0},{blue:.0})"><title>layer.{}.e{expert}: {}</title></rect>"#,
                frame.left + expert as f64 * cell_width,
                cell_width,
                cell_height,
                layer.layer,
                escape(&hover)
            );
        }
    }
    out.push_str("</svg>");
}

/// The darkest cell's figure, in the map's unit.
fn value_label(title: &str, largest: f64) -> String {
    if title == "MLP time" {
        format!("{:.3} ms", largest / 1e6)
    } else {
        format!("{largest:.0} rows")
    }
}
