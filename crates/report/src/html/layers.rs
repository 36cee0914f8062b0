//! The per-layer chart: a stacked bar per layer (every scope group:
//! `embed`, `layer.N`, `lm_head`) of its time per token by op kind, layers
//! that differ from their identical layers outlined in red and marked `*`,
//! and a legend of the op kinds' colours.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use kernelscope::hash::fnv1a64;
use kernelscope::profile::{DispatchRecord, OpKind, fold_inputs, layer_of, outliers};

use super::markup::escape;
use super::svg::Frame;
use crate::summary::{Summary, saturating_sum};

/// Colours of the op kinds the page was first drawn with, by name, so a
/// kind keeps its colour from one report to the next (distinct enough for
/// 20 kinds side by side, and readable on white).
const NAMED_COLOURS: [(&str, &str); 20] = [
    ("Embedding", "#4e79a7"),
    ("RmsNorm", "#f28e2b"),
    ("MatVec", "#e15759"),
    ("MatMul", "#76b7b2"),
    ("Rope", "#59a14f"),
    ("Attention", "#edc948"),
    ("Softmax", "#b07aa1"),
    ("SiluMul", "#ff9da7"),
    ("ElemAdd", "#9c755f"),
    ("ElemMul", "#bab0ac"),
    ("Argmax", "#1f77b4"),
    ("Sample", "#aec7e8"),
    ("Copy", "#ff7f0e"),
    ("RmsNorm+MatVec", "#2ca02c"),
    ("RmsNorm+MatVec+SiluMul", "#98df8a"),
    ("MatVec+ElemAdd", "#d62728"),
    ("Rope+Copy", "#9467bd"),
    ("AllReduce", "#8c564b"),
    ("AllGather", "#e377c2"),
    ("Other", "#7f7f7f"),
];

/// The colour of `kind`: its own, or for a kind new to the page (a fused
/// kind of other parts, one this build does not know) one of the same
/// colours picked by its name, so it is stable too.
fn op_colour(kind: OpKind) -> &'static str {
    let name = kind.name();
    match NAMED_COLOURS.iter().find(|(known, _)| *known == name) {
        Some((_, colour)) => colour,
        None => NAMED_COLOURS[(fnv1a64(name.as_bytes()) % NAMED_COLOURS.len() as u64) as usize].1,
    }
}

/// One bar of the per-layer chart.
pub(super) struct LayerBar {
    name: String,
    /// Time per repetition token by op kind, in order of first appearance.
    segments: Vec<(OpKind, f64)>,
    /// Time per repetition token.
    pub total_ns: f64,
    /// Differs from the layers that do the same work by more than the noise.
    outlier: bool,
}

/// The layers of the summary (every scope group: `embed`, `layer.N`,
/// `lm_head`), time per repetition token by op kind.
pub(super) fn layer_bars(summary: &Summary<'_>, repetitions: usize) -> Vec<LayerBar> {
    let repetitions = repetitions.max(1) as f64;
    let layers = summary.groups(|record| layer_of(&record.scope));
    let inputs = fold_inputs(summary.records.iter().copied(), |record| layer_of(&record.scope));
    let differs: HashMap<String, bool> = inputs
        .iter()
        .zip(outliers(&inputs))
        .map(|(input, outlier)| (input.key.clone(), outlier))
        .collect();
    let mut by_layer: HashMap<String, Vec<&DispatchRecord>> = HashMap::new();
    for record in summary.records.iter().copied() {
        by_layer.entry(layer_of(&record.scope)).or_default().push(record);
    }
    layers
        .iter()
        .map(|layer| {
            let members = by_layer.get(&layer.key).map(Vec::as_slice).unwrap_or_default();
            let mut kinds: Vec<OpKind> = Vec::new();
            let mut seen = HashSet::new();
            for record in members {
                if seen.insert(record.op_kind) {
                    kinds.push(record.op_kind);
                }
            }
            let segments = kinds
                .into_iter()
                .map(|kind| {
                    let ns = saturating_sum(
                        members
                            .iter()
                            .filter(|record| record.op_kind == kind)
                            .map(|record| record.duration_ns()),
                    );
                    (kind, ns as f64 / repetitions)
                })
                .collect();
            LayerBar {
                name: layer.key.clone(),
                segments,
                total_ns: layer.total_ns as f64 / repetitions,
                outlier: differs.get(&layer.key).copied().unwrap_or(false),
            }
        })
        .collect()
}

/// The per-layer chart: a stacked bar per layer, µs per token by op kind,
/// the full height `scale_ns` where given (the tallest bar otherwise);
/// layers that differ from their identical layers are outlined in red and
/// marked `*`.
pub(super) fn layer_chart(out: &mut String, bars: &[LayerBar], scale_ns: Option<f64>) {
    if bars.is_empty() {
        out.push_str(r#"<p class="empty">No dispatch times: no per-layer picture.</p>"#);
        return;
    }
    let step = (900.0 / bars.len() as f64).clamp(6.0, 28.0);
    let frame = Frame {
        width: 70.0 + 20.0 + step * bars.len() as f64,
        height: 330.0,
        left: 70.0,
        right: 20.0,
        top: 20.0,
        bottom: 70.0,
    };
    let highest = scale_ns.unwrap_or_else(|| bars.iter().map(|bar| bar.total_ns).fold(0.0, f64::max));
    let highest = if highest > 0.0 { highest } else { 1.0 };
    frame.open(out, "layers", "time per token of each layer, by op kind");
    frame.value_axis(
        out,
        [0.0, 0.25, 0.5, 0.75, 1.0].map(|fraction| (fraction, format!("{:.1}", highest * fraction / 1e3))),
        "µs per token",
    );
    let label_every = (bars.len() / 40).max(1);
    for (position, bar) in bars.iter().enumerate() {
        let left = frame.left + step * position as f64 + step * 0.1;
        let labeled = position % label_every == 0 || bar.outlier;
        layer_bar(out, &frame, bar, (left, step * 0.8), highest, labeled);
    }
    out.push_str("</svg>");
    legend(out, bars);
}

/// One layer's stacked bar at `left` of `width` (`highest` ns at the full
/// height), with its hover text, its mark if it differs, and its name
/// below where `labeled`.
fn layer_bar(
    out: &mut String,
    frame: &Frame,
    bar: &LayerBar,
    (left, width): (f64, f64),
    highest: f64,
    labeled: bool,
) {
    let outlier = if bar.outlier { " outlier" } else { "" };
    let _ = write!(
        out,
        r#"<g class="layer-bar{outlier}" data-layer="{}">"#,
        escape(&bar.name)
    );
    let mut bottom = frame.top + frame.plot_height();
    let mut parts = Vec::new();
    for (kind, ns) in &bar.segments {
        let height = ns / highest * frame.plot_height();
        bottom -= height;
        parts.push(format!("{} {:.1} µs", kind.name(), ns / 1e3));
        let _ = write!(
            out,
            r#"<rect class="segment" data-op="{}" x="{left:.1}" y="{bottom:.1}" width="{width:.1}" height="{height:.1}" fill="{}"/>"#,
            escape(&kind.name()),
            op_colour(*kind)
        );
    }
    let differs = if bar.outlier {
        "\ndiffers from the layers that do the same work by more than the noise"
    } else {
        ""
    };
    let _ = write!(
        out,
        r#"<rect class="hover" x="{left:.1}" y="{:.1}" width="{width:.1}" height="{:.1}" fill="transparent"{}><title>{}: {:.1} µs per token{differs}&#10;{}</title></rect>"#,
        frame.top,
        frame.plot_height(),
        if bar.outlier {
            r##" stroke="#d62728" stroke-width="2""##
        } else {
            ""
        },
        escape(&bar.name),
        bar.total_ns / 1e3,
        escape(&parts.join("\n"))
    );
    if bar.outlier {
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" class="marker" text-anchor="middle" fill="#d62728">*</text>"##,
            left + width / 2.0,
            bottom - 3.0
        );
    }
    if labeled {
        let _ = write!(
            out,
            r#"<text transform="translate({:.1} {:.1}) rotate(-60)" class="tick" text-anchor="end">{}</text>"#,
            left + width / 2.0,
            frame.height - frame.bottom + 10.0,
            escape(&bar.name)
        );
    }
    out.push_str("</g>");
}

/// The op kinds of the bars with their colours, in order of appearance.
fn legend(out: &mut String, bars: &[LayerBar]) {
    let mut kinds: Vec<OpKind> = Vec::new();
    for bar in bars {
        for (kind, _) in &bar.segments {
            if !kinds.contains(kind) {
                kinds.push(*kind);
            }
        }
    }
    out.push_str(r#"<p class="legend">"#);
    for kind in kinds {
        let _ = write!(
            out,
            r#"<span><i style="background:{}"></i>{}</span> "#,
            op_colour(kind),
            escape(&kind.name())
        );
    }
    out.push_str("</p>");
}
