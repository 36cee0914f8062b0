//! The roofline chart: one circle per kernel that declares flops and bytes
//! at its arithmetic intensity and achieved GFLOP/s, one square per op kind
//! (shown with the page's switch), under the measured bandwidth and compute
//! ceilings; the kernels without flops as bars of their bandwidth against
//! the peak below it. Two runs side by side share one extent.

use std::fmt::Write;

use kernelscope::profile::Aggregate;

use super::markup::escape;
use super::svg::{Frame, LogAxis, decade_label, shorten};
use crate::summary::{Summary, kernel_of, op_of, saturating_sum};

/// One group (a kernel or an op kind) placed on the roofline.
pub(super) struct RooflineMark {
    name: String,
    calls: u64,
    total_ns: u64,
    bytes: u64,
    flops: u64,
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
pub(super) fn roofline_marks(summary: &Summary<'_>) -> (Vec<RooflineMark>, Vec<RooflineMark>) {
    let marks = |rows: Vec<Aggregate>| rows.iter().map(RooflineMark::of).collect::<Vec<_>>();
    (
        marks(summary.heaviest_groups(kernel_of)),
        marks(summary.heaviest_groups(op_of)),
    )
}

/// Flops per byte where both peaks are known and positive.
fn ridge_point(peak_gbps: Option<f64>, peak_gflops: Option<f64>) -> Option<f64> {
    match (peak_gbps, peak_gflops) {
        (Some(gbps), Some(gflops)) if gbps > 0.0 && gflops > 0.0 => Some(gflops / gbps),
        _ => None,
    }
}

/// The extent of a roofline chart: intensities and rates to cover (two
/// runs side by side share one, so their points compare by position).
#[derive(Clone, Copy, Debug)]
pub(super) struct RooflineRange {
    x_low: f64,
    x_high: f64,
    y_low: f64,
    y_high: f64,
}

impl RooflineRange {
    /// What covers the marks that can be placed and the ceilings (a decade
    /// either side of the ridge point); `None` when no mark can be placed.
    pub fn of(
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
        let ridge = ridge_point(peak_gbps, peak_gflops);
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
    pub fn union(self, other: RooflineRange) -> RooflineRange {
        RooflineRange {
            x_low: self.x_low.min(other.x_low),
            x_high: self.x_high.max(other.x_high),
            y_low: self.y_low.min(other.y_low),
            y_high: self.y_high.max(other.y_high),
        }
    }
}

/// The roofline chart of `kernels` and `ops` on `shared`'s extent where
/// given, then the bandwidth bars of the kernels without flops.
pub(super) fn roofline(
    out: &mut String,
    kernels: &[RooflineMark],
    ops: &[RooflineMark],
    peak_gbps: Option<f64>,
    peak_gflops: Option<f64>,
    shared: Option<RooflineRange>,
) {
    // Nothing of this run to place: no chart, even on a shared extent.
    let own = RooflineRange::of(kernels, ops, peak_gbps, peak_gflops);
    if let Some(range) = own.map(|own| shared.unwrap_or(own)) {
        let plot = RooflinePlot {
            frame: Frame {
                width: 760.0,
                height: 440.0,
                left: 70.0,
                right: 20.0,
                top: 16.0,
                bottom: 46.0,
            },
            x_axis: LogAxis::covering(range.x_low, range.x_high),
            y_axis: LogAxis::covering(range.y_low / 2.0, range.y_high),
        };
        plot.frame.open(
            out,
            "roofline",
            "roofline: achieved GFLOP/s against arithmetic intensity",
        );
        plot.axes(out);
        plot.ceilings(out, peak_gbps, peak_gflops);
        plot.marks(out, kernels, ops, peak_gbps, peak_gflops);
        out.push_str("</svg>");
    } else {
        out.push_str(r#"<p class="empty">No kernel declares both flops and bytes: nothing to place on the roofline.</p>"#);
    }
    bandwidth_bars(out, kernels, peak_gbps, peak_gflops);
}

/// A roofline's frame and its two log axes: intensity across, rate up.
struct RooflinePlot {
    frame: Frame,
    x_axis: LogAxis,
    y_axis: LogAxis,
}

impl RooflinePlot {
    fn x(&self, intensity: f64) -> f64 {
        self.frame.left + self.x_axis.fraction(intensity) * self.frame.plot_width()
    }

    fn y(&self, gflops: f64) -> f64 {
        self.frame.top + (1.0 - self.y_axis.fraction(gflops)) * self.frame.plot_height()
    }

    /// Grid lines and labels at every decade, and the axes' titles.
    fn axes(&self, out: &mut String) {
        let frame = &self.frame;
        for decade in self.x_axis.decades() {
            let at = self.x(10f64.powi(decade));
            let _ = write!(
                out,
                r##"<line x1="{at:.1}" y1="{:.1}" x2="{at:.1}" y2="{:.1}" stroke="#e4e4e4"/><text x="{at:.1}" y="{:.1}" class="tick" text-anchor="middle">{}</text>"##,
                frame.top,
                frame.height - frame.bottom,
                frame.height - frame.bottom + 16.0,
                decade_label(decade)
            );
        }
        let y_axis = self.y_axis;
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
    }

    /// The ceilings: bandwidth × intensity up to the ridge, then the
    /// compute peak; clipped to the plot.
    fn ceilings(&self, out: &mut String, peak_gbps: Option<f64>, peak_gflops: Option<f64>) {
        let ridge = ridge_point(peak_gbps, peak_gflops);
        let (x_min, x_max) = (self.x_axis.low(), self.x_axis.high());
        let (y_min, y_max) = (self.y_axis.low(), self.y_axis.high());
        if let Some(gbps) = peak_gbps.filter(|peak| *peak > 0.0) {
            let end = ridge.unwrap_or(x_max).min(x_max).min(y_max / gbps);
            let start = x_min.max(y_min / gbps);
            if start < end {
                let _ = write!(
                    out,
                    r##"<line class="ceiling bandwidth" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#c0392b" stroke-width="2"><title>peak bandwidth {gbps:.1} GB/s (copy probe)</title></line>"##,
                    self.x(start),
                    self.y(start * gbps),
                    self.x(end),
                    self.y(end * gbps)
                );
            }
        }
        if let Some(gflops) = peak_gflops.filter(|peak| *peak > 0.0 && *peak <= y_max) {
            let start = ridge.unwrap_or(x_min).max(x_min);
            let _ = write!(
                out,
                r##"<line class="ceiling compute" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#2c3e50" stroke-width="2"><title>peak compute {gflops:.1} GFLOP/s (GEMM probe)</title></line>"##,
                self.x(start),
                self.y(gflops),
                self.x(x_max),
                self.y(gflops)
            );
        }
    }

    /// A circle per kernel and a square per op kind that can be placed,
    /// their area by share of the time so the heavy ones stand out.
    fn marks(
        &self,
        out: &mut String,
        kernels: &[RooflineMark],
        ops: &[RooflineMark],
        peak_gbps: Option<f64>,
        peak_gflops: Option<f64>,
    ) {
        let total = saturating_sum(kernels.iter().map(|mark| mark.total_ns)).max(1);
        for (class, marks) in [("roofline-point", kernels), ("roofline-op", ops)] {
            for mark in marks {
                let (Some(intensity), Some(gflops)) = (mark.intensity(), mark.gigaflops()) else {
                    continue;
                };
                let (cx, cy) = (self.x(intensity), self.y(gflops));
                let title = escape(&mark.describe(peak_gbps, peak_gflops));
                let name = escape(&mark.name);
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
    }
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
