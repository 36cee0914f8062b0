//! The expert section of a mixture-of-experts run's report: what a token
//! reads of its experts against the whole model, each sparse layer's load
//! (rows routed, experts used, the busiest and how far above the mean it
//! is), and the experts that took the most time, their layer's MLP time
//! split by the rows routed to each.

use std::fmt::Write;

use kernelscope::profile::{ExpertRouting, LayerRouting, Profile};

use super::options::ReportOptions;
use super::table::table;

/// Layers the short report lists (the most imbalanced); `--full` lists all.
const SHORT_LAYERS: usize = 6;

/// Experts the short report lists by time.
const SHORT_EXPERTS: usize = 10;

/// Renders the section when the profile has routing.
pub(super) fn render_experts(profile: &Profile, options: ReportOptions, out: &mut String) {
    let Some(routing) = &profile.experts else {
        return;
    };
    let rows: u64 = routing.layers.first().map_or(0, LayerRouting::routed) / routing.per_token.max(1) as u64;
    let _ = writeln!(
        out,
        "\nexperts: {} of {} per row in {} sparse layers, {rows} rows routed; a decoded token reads {} of expert weights ({} per expert)",
        routing.per_token,
        routing.experts,
        routing.layers.len(),
        megabytes(routing.active_bytes_per_token()),
        megabytes(routing.expert_bytes),
    );
    render_layers(routing, options, out);
    render_top_experts(profile, routing, options, out);
}

/// One line per sparse layer (the most imbalanced first in the short report).
fn render_layers(routing: &ExpertRouting, options: ReportOptions, out: &mut String) {
    let mut layers: Vec<&LayerRouting> = routing.layers.iter().collect();
    let shown = if options.full {
        layers.len()
    } else {
        layers.sort_by(|a, b| {
            b.imbalance()
                .total_cmp(&a.imbalance())
                .then(a.layer.cmp(&b.layer))
        });
        layers.len().min(SHORT_LAYERS)
    };
    let heading = if shown < layers.len() {
        format!(
            "\nper sparse layer, the {shown} most imbalanced of {}:",
            layers.len()
        )
    } else {
        "\nper sparse layer:".to_string()
    };
    let _ = writeln!(out, "{heading}");
    let rows = layers[..shown].iter().map(|layer| {
        let (busiest, busiest_rows) = layer.busiest();
        vec![
            format!("layer.{}", layer.layer),
            layer.routed().to_string(),
            (routing.experts - layer.idle()).to_string(),
            format!("e{busiest} ({busiest_rows})"),
            format!("{:.2}x", layer.imbalance()),
        ]
    });
    let _ = writeln!(
        out,
        "{}",
        table(
            &[
                "layer",
                "rows routed",
                "experts used",
                "busiest (rows)",
                "busiest / mean"
            ],
            rows
        )
    );
    if shown < layers.len() {
        let _ = writeln!(out, "… {} more layers (--full shows all)", layers.len() - shown);
    }
}

/// The experts that took the most time.
fn render_top_experts(profile: &Profile, routing: &ExpertRouting, options: ReportOptions, out: &mut String) {
    let shares = routing.apportioned_time(&profile.dispatches);
    if shares.is_empty() {
        return;
    }
    let total: u64 = shares.iter().map(|share| share.3).sum();
    let shown = if options.full {
        shares.len()
    } else {
        shares.len().min(SHORT_EXPERTS)
    };
    let _ = writeln!(
        out,
        "\nexperts by time (each sparse layer's MLP time split by the rows routed to each expert):"
    );
    let rows = shares[..shown].iter().map(|&(layer, expert, rows, ns)| {
        vec![
            format!("layer.{layer}.e{expert}"),
            rows.to_string(),
            format!("{:.3}", ns as f64 / 1e6),
            format!("{:.1}%", 100.0 * ns as f64 / total.max(1) as f64),
        ]
    });
    let _ = writeln!(
        out,
        "{}",
        table(&["expert", "rows", "ms", "share of MLP time"], rows)
    );
    if shown < shares.len() {
        let _ = writeln!(out, "… {} more experts (--full shows all)", shares.len() - shown);
    }
}

/// Bytes in MB, or kB below one MB.
fn megabytes(bytes: u64) -> String {
    if bytes >= 1_000_000 {
        format!("{:.1} MB", bytes as f64 / 1e6)
    } else {
        format!("{:.1} kB", bytes as f64 / 1e3)
    }
}
