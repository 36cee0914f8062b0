//! The page's charts, drawn here as inline SVG so the page needs no script
//! and no network to show them: the roofline (kernels and ops against the
//! bandwidth and compute ceilings), the per-layer stacked bars (time by op
//! kind) and the per-token timeline (device busy, idle, host enqueue).
//! Every mark carries a `<title>`, which browsers show on hover.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use super::escape;
use crate::profile::aggregate::{Aggregate, aggregate, layer_of};
use crate::profile::fold::{fold_inputs, outliers};
use crate::profile::report::Summary;
use crate::profile::{DispatchRecord, OpKind, Phase, Profile};

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
    NAMED_COLOURS
        .iter()
        .find(|(known, _)| *known == name)
        .map_or_else(
            || NAMED_COLOURS[(crate::hash::fnv1a64(name.as_bytes()) % NAMED_COLOURS.len() as u64) as usize].1,
            |(_, colour)| colour,
        )
}

/// Plot area inside an SVG of `width` × `height`.
struct Frame {
    width: f64,
    height: f64,
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
}

impl Frame {
    /// A vertical axis: a grid line and label at each tick (its fraction of
    /// the plot's height, 0 at the bottom, and its label), and the title.
    fn value_axis(&self, out: &mut String, ticks: impl IntoIterator<Item = (f64, String)>, title: &str) {
        for (fraction, label) in ticks {
            let at = self.top + (1.0 - fraction) * self.plot_height();
            let _ = write!(
                out,
                r##"<line x1="{:.1}" y1="{at:.1}" x2="{:.1}" y2="{at:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" class="tick" text-anchor="end">{}</text>"##,
                self.left,
                self.width - self.right,
                self.left - 6.0,
                at + 4.0,
                label
            );
        }
        let _ = write!(
            out,
            r#"<text transform="translate(16 {:.1}) rotate(-90)" class="axis" text-anchor="middle">{}</text>"#,
            self.top + self.plot_height() / 2.0,
            escape(title)
        );
    }

    fn plot_width(&self) -> f64 {
        self.width - self.left - self.right
    }

    fn plot_height(&self) -> f64 {
        self.height - self.top - self.bottom
    }

    fn open(&self, out: &mut String, class: &str, label: &str) {
        let _ = write!(
            out,
            r#"<svg class="{class}" role="img" aria-label="{}" width="{:.0}" height="{:.0}" viewBox="0 0 {:.0} {:.0}" xmlns="http://www.w3.org/2000/svg">"#,
            escape(label),
            self.width,
            self.height,
            self.width,
            self.height
        );
        let _ = write!(
            out,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#fafafa" stroke="#ccc"/>"##,
            self.left,
            self.top,
            self.plot_width(),
            self.plot_height()
        );
    }
}

/// A log-10 axis over whole decades covering `low..high`.
#[derive(Clone, Copy)]
struct LogAxis {
    low_decade: i32,
    high_decade: i32,
}

impl LogAxis {
    fn covering(low: f64, high: f64) -> LogAxis {
        let low_decade = low.max(f64::MIN_POSITIVE).log10().floor() as i32;
        let high_decade = (high.max(f64::MIN_POSITIVE).log10().ceil() as i32).max(low_decade + 1);
        LogAxis {
            low_decade,
            high_decade,
        }
    }

    /// Position of `value` in 0..1 along the axis.
    fn fraction(self, value: f64) -> f64 {
        (value.log10() - f64::from(self.low_decade)) / f64::from(self.high_decade - self.low_decade)
    }

    fn decades(self) -> impl Iterator<Item = i32> {
        self.low_decade..=self.high_decade
    }
}

/// `10^k` as a short label: 0.01, 1, 1k, 1M.
fn decade_label(decade: i32) -> String {
    match decade {
        d if d < 0 => format!("{}", 10f64.powi(d)),
        0..=2 => format!("{}", 10u64.pow(decade as u32)),
        3..=5 => format!("{}k", 10u64.pow(decade as u32 - 3)),
        6..=8 => format!("{}M", 10u64.pow(decade as u32 - 6)),
        _ => format!("1e{decade}"),
    }
}

/// One group (a kernel or an op kind) placed on the roofline.
pub(crate) struct RooflineMark {
    pub name: String,
    pub calls: u64,
    pub total_ns: u64,
    pub bytes: u64,
    pub flops: u64,
}

impl RooflineMark {
    fn of(row: &Aggregate) -> RooflineMark {
        RooflineMark {
            name: row.key.clone(),
            calls: row.calls,
            total_ns: row.total_ns,
            bytes: row.bytes,
            flops: row.flops,
        }
    }

    fn intensity(&self) -> Option<f64> {
        (self.flops > 0 && self.bytes > 0).then(|| self.flops as f64 / self.bytes as f64)
    }

    fn gigaflops(&self) -> Option<f64> {
        (self.flops > 0 && self.total_ns > 0).then(|| self.flops as f64 / self.total_ns as f64)
    }

    fn gigabytes(&self) -> Option<f64> {
        (self.bytes > 0 && self.total_ns > 0).then(|| self.bytes as f64 / self.total_ns as f64)
    }

    /// Hover text: name, calls, µs, GB/s, GFLOP/s, % of the peaks.
    fn describe(&self, peak_gbps: Option<f64>, peak_gflops: Option<f64>) -> String {
        let mut text = format!(
            "{}\n{} calls, {:.1} µs in all, {:.2} µs each",
            self.name,
            self.calls,
            self.total_ns as f64 / 1e3,
            self.total_ns as f64 / 1e3 / self.calls.max(1) as f64
        );
        if let Some(gbps) = self.gigabytes() {
            let _ = write!(text, "\n{gbps:.1} GB/s");
            if let Some(peak) = peak_gbps.filter(|peak| *peak > 0.0) {
                let _ = write!(text, " ({:.1}% of peak bandwidth)", 100.0 * gbps / peak);
            }
        }
        if let Some(gflops) = self.gigaflops() {
            let _ = write!(text, "\n{gflops:.1} GFLOP/s");
            if let Some(peak) = peak_gflops.filter(|peak| *peak > 0.0) {
                let _ = write!(text, " ({:.1}% of peak compute)", 100.0 * gflops / peak);
            }
        }
        if let Some(intensity) = self.intensity() {
            let _ = write!(text, "\n{intensity:.2} FLOP/B");
        }
        text
    }
}

/// The kernels and the op kinds of the summary, heaviest first.
pub(crate) fn roofline_marks(summary: &Summary<'_>) -> (Vec<RooflineMark>, Vec<RooflineMark>) {
    let by_total = |mut rows: Vec<Aggregate>| {
        rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.key.cmp(&b.key)));
        rows.iter().map(RooflineMark::of).collect::<Vec<_>>()
    };
    let records = || summary.records.iter().copied();
    (
        by_total(aggregate(records(), |record| record.kernel.to_string())),
        by_total(aggregate(records(), |record| record.op_kind.name().to_string())),
    )
}

/// The extent of a roofline chart: intensities and rates to cover (two
/// runs side by side share one, so their points compare by position).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RooflineRange {
    x_low: f64,
    x_high: f64,
    y_low: f64,
    y_high: f64,
}

impl RooflineRange {
    /// What covers the marks that can be placed and the ceilings (a decade
    /// either side of the ridge point); `None` when no mark can be placed.
    pub(crate) fn of(
        kernels: &[RooflineMark],
        ops: &[RooflineMark],
        peak_gbps: Option<f64>,
        peak_gflops: Option<f64>,
    ) -> Option<RooflineRange> {
        let placed: Vec<(f64, f64)> = kernels
            .iter()
            .chain(ops)
            .filter_map(|mark| Some((mark.intensity()?, mark.gigaflops()?)))
            .collect();
        if placed.is_empty() {
            return None;
        }
        let ridge = match (peak_gbps, peak_gflops) {
            (Some(gbps), Some(gflops)) if gbps > 0.0 && gflops > 0.0 => Some(gflops / gbps),
            _ => None,
        };
        let x_low = placed
            .iter()
            .map(|(x, _)| *x)
            .fold(f64::INFINITY, f64::min)
            .min(ridge.unwrap_or(f64::INFINITY) / 10.0);
        let x_high = placed
            .iter()
            .map(|(x, _)| *x)
            .fold(0.0, f64::max)
            .max(ridge.unwrap_or(0.0) * 10.0);
        let y_low = placed.iter().map(|(_, y)| *y).fold(f64::INFINITY, f64::min);
        let y_high = placed
            .iter()
            .map(|(_, y)| *y)
            .fold(0.0, f64::max)
            .max(peak_gflops.unwrap_or(0.0) * 1.5);
        Some(RooflineRange {
            x_low,
            x_high,
            y_low,
            y_high,
        })
    }

    /// What covers both.
    pub(crate) fn union(self, other: RooflineRange) -> RooflineRange {
        RooflineRange {
            x_low: self.x_low.min(other.x_low),
            x_high: self.x_high.max(other.x_high),
            y_low: self.y_low.min(other.y_low),
            y_high: self.y_high.max(other.y_high),
        }
    }
}

/// The roofline chart: one circle per kernel that declares flops and bytes,
/// one square per op kind (shown with the page's "ops" switch); kernels
/// that declare no flops (copies, gathers, collectives) as bars of their
/// bandwidth against the peak below it.
pub(crate) fn roofline(
    out: &mut String,
    kernels: &[RooflineMark],
    ops: &[RooflineMark],
    peak_gbps: Option<f64>,
    peak_gflops: Option<f64>,
    shared: Option<RooflineRange>,
) {
    let ridge = match (peak_gbps, peak_gflops) {
        (Some(gbps), Some(gflops)) if gbps > 0.0 && gflops > 0.0 => Some(gflops / gbps),
        _ => None,
    };
    // Nothing of this run to place: no chart, even on a shared extent.
    let own = RooflineRange::of(kernels, ops, peak_gbps, peak_gflops);
    let range = own.map(|own| shared.unwrap_or(own));
    let frame = Frame {
        width: 760.0,
        height: 440.0,
        left: 70.0,
        right: 20.0,
        top: 16.0,
        bottom: 46.0,
    };
    if let Some(range) = range {
        let x_axis = LogAxis::covering(range.x_low, range.x_high);
        let y_axis = LogAxis::covering(range.y_low / 2.0, range.y_high);
        let x = |value: f64| frame.left + x_axis.fraction(value) * frame.plot_width();
        let y = |value: f64| frame.top + (1.0 - y_axis.fraction(value)) * frame.plot_height();
        frame.open(
            out,
            "roofline",
            "roofline: achieved GFLOP/s against arithmetic intensity",
        );
        for decade in x_axis.decades() {
            let at = x(10f64.powi(decade));
            let _ = write!(
                out,
                r##"<line x1="{at:.1}" y1="{:.1}" x2="{at:.1}" y2="{:.1}" stroke="#e4e4e4"/><text x="{at:.1}" y="{:.1}" class="tick" text-anchor="middle">{}</text>"##,
                frame.top,
                frame.height - frame.bottom,
                frame.height - frame.bottom + 16.0,
                decade_label(decade)
            );
        }
        frame.value_axis(
            out,
            y_axis
                .decades()
                .map(|decade| (y_axis.fraction(10f64.powi(decade)), decade_label(decade))),
            "achieved GFLOP/s",
        );
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{:.1}" class="axis" text-anchor="middle">arithmetic intensity (FLOP/B, declared)</text>"#,
            frame.left + frame.plot_width() / 2.0,
            frame.height - 8.0,
        );
        // The ceilings: bandwidth × intensity up to the ridge, then the
        // compute peak; clipped to the plot.
        let x_min = 10f64.powi(x_axis.low_decade);
        let x_max = 10f64.powi(x_axis.high_decade);
        let y_max = 10f64.powi(y_axis.high_decade);
        let y_min = 10f64.powi(y_axis.low_decade);
        if let Some(gbps) = peak_gbps.filter(|peak| *peak > 0.0) {
            let end = ridge.unwrap_or(x_max).min(x_max).min(y_max / gbps);
            let start = x_min.max(y_min / gbps);
            if start < end {
                let _ = write!(
                    out,
                    r##"<line class="ceiling bandwidth" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#c0392b" stroke-width="2"><title>peak bandwidth {gbps:.1} GB/s (copy probe)</title></line>"##,
                    x(start),
                    y(start * gbps),
                    x(end),
                    y(end * gbps)
                );
            }
        }
        if let Some(gflops) = peak_gflops.filter(|peak| *peak > 0.0 && *peak <= y_max) {
            let start = ridge.unwrap_or(x_min).max(x_min);
            let _ = write!(
                out,
                r##"<line class="ceiling compute" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#2c3e50" stroke-width="2"><title>peak compute {gflops:.1} GFLOP/s (GEMM probe)</title></line>"##,
                x(start),
                y(gflops),
                x(x_max),
                y(gflops)
            );
        }
        let total: u64 = kernels.iter().map(|mark| mark.total_ns).sum::<u64>().max(1);
        for (class, marks) in [("roofline-point", kernels), ("roofline-op", ops)] {
            for mark in marks {
                let (Some(intensity), Some(gflops)) = (mark.intensity(), mark.gigaflops()) else {
                    continue;
                };
                let (cx, cy) = (x(intensity), y(gflops));
                let title = escape(&mark.describe(peak_gbps, peak_gflops));
                let name = escape(&mark.name);
                // Area by share of the time: the heavy kernels stand out.
                let radius = 3.0 + 12.0 * (mark.total_ns as f64 / total as f64).sqrt();
                if class == "roofline-point" {
                    let _ = write!(
                        out,
                        r##"<circle class="{class}" data-name="{name}" cx="{cx:.1}" cy="{cy:.1}" r="{radius:.1}" fill="#4e79a7" fill-opacity="0.55" stroke="#1d3c5e"><title>{title}</title></circle>"##
                    );
                } else {
                    let side = radius * 1.6;
                    let _ = write!(
                        out,
                        r##"<rect class="{class}" data-name="{name}" x="{:.1}" y="{:.1}" width="{side:.1}" height="{side:.1}" fill="#f28e2b" fill-opacity="0.55" stroke="#8a4a0b"><title>{title}</title></rect>"##,
                        cx - side / 2.0,
                        cy - side / 2.0
                    );
                }
            }
        }
        out.push_str("</svg>");
    } else {
        out.push_str(r#"<p class="empty">No kernel declares both flops and bytes: nothing to place on the roofline.</p>"#);
    }
    bandwidth_bars(out, kernels, peak_gbps, peak_gflops);
}

/// Kernels that declare bytes but no flops: their achieved bandwidth as a
/// bar against the peak.
fn bandwidth_bars(
    out: &mut String,
    kernels: &[RooflineMark],
    peak_gbps: Option<f64>,
    peak_gflops: Option<f64>,
) {
    let memory: Vec<&RooflineMark> = kernels.iter().filter(|mark| mark.intensity().is_none()).collect();
    if memory.is_empty() {
        return;
    }
    let scale = peak_gbps.filter(|peak| *peak > 0.0).unwrap_or_else(|| {
        memory
            .iter()
            .filter_map(|mark| mark.gigabytes())
            .fold(1.0, f64::max)
    });
    let row = 18.0;
    let frame = Frame {
        width: 760.0,
        height: 30.0 + row * memory.len() as f64,
        left: 250.0,
        right: 90.0,
        top: 8.0,
        bottom: 22.0,
    };
    out.push_str(r#"<h3>Kernels without flops: bandwidth against the peak</h3>"#);
    frame.open(
        out,
        "bandwidth",
        "achieved bandwidth of the kernels that declare no flops",
    );
    for (position, mark) in memory.iter().enumerate() {
        let top = frame.top + row * position as f64 + 2.0;
        let gbps = mark.gigabytes().unwrap_or(0.0);
        let width = (gbps / scale).clamp(0.0, 1.0) * frame.plot_width();
        let share = if peak_gbps.is_some() {
            format!("{:.1}%", 100.0 * gbps / scale)
        } else {
            format!("{gbps:.0} GB/s")
        };
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" class="label" text-anchor="end">{}</text><rect class="bandwidth-bar" data-name="{}" x="{:.1}" y="{top:.1}" width="{width:.1}" height="{:.1}" fill="#76b7b2"><title>{}</title></rect><text x="{:.1}" y="{:.1}" class="label">{share}</text>"##,
            frame.left - 6.0,
            top + 11.0,
            escape(&shorten(&mark.name, 38)),
            escape(&mark.name),
            frame.left,
            row - 4.0,
            escape(&mark.describe(peak_gbps, peak_gflops)),
            frame.left + width + 4.0,
            top + 11.0
        );
    }
    out.push_str("</svg>");
}

fn shorten(text: &str, most: usize) -> String {
    if text.chars().count() <= most {
        text.to_string()
    } else {
        let kept: String = text.chars().take(most - 1).collect();
        format!("{kept}…")
    }
}

/// One bar of the per-layer chart.
pub(crate) struct LayerBar {
    pub name: String,
    /// Time per repetition token by op kind, in order of first appearance.
    pub segments: Vec<(OpKind, f64)>,
    pub total_ns: f64,
    /// Differs from the layers that do the same work by more than the noise.
    pub outlier: bool,
}

/// The layers of the summary (every scope group: `embed`, `layer.N`,
/// `lm_head`), time per repetition token by op kind.
pub(crate) fn layer_bars(summary: &Summary<'_>, repetitions: usize) -> Vec<LayerBar> {
    let repetitions = repetitions.max(1) as f64;
    let records = || summary.records.iter().copied();
    let layers = aggregate(records(), |record| layer_of(&record.scope));
    let inputs = fold_inputs(records(), |record| layer_of(&record.scope));
    let differs: HashMap<String, bool> = inputs
        .iter()
        .zip(outliers(&inputs))
        .map(|(input, outlier)| (input.key.clone(), outlier))
        .collect();
    let mut by_layer: HashMap<String, Vec<&DispatchRecord>> = HashMap::new();
    for record in records() {
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
                    let ns: u64 = members
                        .iter()
                        .filter(|record| record.op_kind == kind)
                        .map(|record| record.duration_ns())
                        .sum();
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

/// The per-layer chart: a stacked bar per layer, µs per token by op kind;
/// layers that differ from their identical layers are outlined in red and
/// marked `*`.
pub(crate) fn layer_chart(out: &mut String, bars: &[LayerBar], scale_ns: Option<f64>) {
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
        let width = step * 0.8;
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
        if position % label_every == 0 || bar.outlier {
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
    out.push_str("</svg>");
    legend(out, bars);
}

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

/// The per-token timeline: one bar per token of its host wall time, split
/// into the time its submissions kept the device busy and the rest (idle),
/// with the host's enqueue time as a tick.
pub(crate) fn token_timeline(out: &mut String, profile: &Profile) {
    if profile.tokens.is_empty() {
        out.push_str(r#"<p class="empty">The run marked no tokens.</p>"#);
        return;
    }
    let mut busy: HashMap<u32, (u64, u64)> = HashMap::new();
    for submission in &profile.submissions {
        if let Some(token) = submission.token {
            let entry = busy.entry(token).or_insert((0, 0));
            entry.0 = entry.0.saturating_add(submission.duration_ns());
            entry.1 = entry.1.saturating_add(submission.host_enqueue_ns());
        }
    }
    let count = profile.tokens.len();
    let step = (1100.0 / count as f64).clamp(1.0, 24.0);
    let frame = Frame {
        width: 70.0 + 20.0 + step * count as f64,
        height: 260.0,
        left: 70.0,
        right: 20.0,
        top: 16.0,
        bottom: 40.0,
    };
    let highest = profile
        .tokens
        .iter()
        .map(|token| token.duration_ns())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    frame.open(
        out,
        "timeline",
        "per-token timeline: device busy and idle, host enqueue",
    );
    frame.value_axis(
        out,
        [0.0, 0.5, 1.0].map(|fraction| (fraction, format!("{:.2}", highest * fraction / 1e6))),
        "ms per token",
    );
    let _ = write!(
        out,
        r#"<text x="{:.1}" y="{:.1}" class="axis" text-anchor="middle">token</text>"#,
        frame.left + frame.plot_width() / 2.0,
        frame.height - 6.0
    );
    let base = frame.top + frame.plot_height();
    let label_every = (count / 16).max(1);
    for (position, token) in profile.tokens.iter().enumerate() {
        let wall = token.duration_ns();
        let (device, enqueue) = busy.get(&token.index).copied().unwrap_or((0, 0));
        let device = device.min(wall);
        let left = frame.left + step * position as f64;
        let width = (step * 0.85).max(0.8);
        let height = |ns: u64| ns as f64 / highest * frame.plot_height();
        let colour = match token.phase {
            Phase::Prefill => "#9467bd",
            Phase::Decode => "#4e79a7",
        };
        let _ = write!(
            out,
            r##"<g class="token-bar" data-token="{}"><rect class="idle" x="{left:.1}" y="{:.1}" width="{width:.1}" height="{:.1}" fill="#d9d9d9"/><rect class="busy" x="{left:.1}" y="{:.1}" width="{width:.1}" height="{:.1}" fill="{colour}"/>"##,
            token.index,
            base - height(wall),
            height(wall) - height(device),
            base - height(device),
            height(device)
        );
        if enqueue > 0 {
            let _ = write!(
                out,
                r##"<rect class="enqueue" x="{left:.1}" y="{:.1}" width="{width:.1}" height="2" fill="#e15759"/>"##,
                base - height(enqueue.min(wall)) - 1.0
            );
        }
        let _ = write!(
            out,
            r#"<title>token {} ({:?}): {:.3} ms; device busy {:.3} ms ({:.1}%), idle {:.3} ms; host enqueue {:.3} ms; {} dispatches, {} syncs</title></g>"#,
            token.index,
            token.phase,
            wall as f64 / 1e6,
            device as f64 / 1e6,
            100.0 * device as f64 / wall.max(1) as f64,
            (wall - device) as f64 / 1e6,
            enqueue as f64 / 1e6,
            token.counters.dispatches,
            token.counters.syncs
        );
        if position % label_every == 0 {
            let _ = write!(
                out,
                r#"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="middle">{}</text>"#,
                left + width / 2.0,
                base + 14.0,
                token.index
            );
        }
    }
    out.push_str("</svg>");
    out.push_str(
        r#"<p class="legend"><span><i style="background:#9467bd"></i>device busy (prefill)</span> <span><i style="background:#4e79a7"></i>device busy (decode)</span> <span><i style="background:#d9d9d9"></i>device idle</span> <span><i style="background:#e15759"></i>host enqueue (tick height)</span></p>"#,
    );
}

/// The per-layer rows of a comparison as bars of their relative change
/// (right: slower), coloured by verdict.
pub(crate) fn delta_chart(out: &mut String, rows: &[crate::profile::ComparisonRow]) {
    use crate::profile::Verdict;
    let layers: Vec<&crate::profile::ComparisonRow> =
        rows.iter().filter(|row| row.section == "layer").collect();
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
    let row_height = 16.0;
    let frame = Frame {
        width: 760.0,
        height: 34.0 + row_height * layers.len() as f64,
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
        let top = frame.top + row_height * position as f64 + 2.0;
        let (class, colour) = match row.verdict {
            Verdict::Regressed => ("verdict-regressed", "#d62728"),
            Verdict::Improved => ("verdict-improved", "#2ca02c"),
            Verdict::Same => ("verdict-same", "#9e9e9e"),
            Verdict::Added => ("verdict-added", "#1f77b4"),
            Verdict::Removed => ("verdict-removed", "#1f77b4"),
        };
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
            row_height - 4.0,
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
    out.push_str("</svg>");
}
