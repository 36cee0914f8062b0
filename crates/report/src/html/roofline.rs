//! The roofline chart: one circle per kernel that declares flops and bytes
//! at its arithmetic intensity and achieved GFLOP/s, coloured by the format
//! it declares it reads (`q4_k`, `q6_k`, `bf16`, ...) with a legend, one
//! square per op kind (shown with the page's switch), under the measured
//! read-bandwidth and compute ceilings; the kernels without flops as bars
//! of how close they came to their floor time (bytes read at the read
//! ceiling plus bytes written at the write ceiling) below it, coloured
//! alike. Two runs side by side share one extent.

use std::fmt::Write;

use kernelscope::profile::{Aggregate, PeakShare, Roofline, placements};

use super::markup::escape;
use super::svg::{Frame, LogAxis, decade_label, shorten};
use crate::formats::{OTHER, format_colour, in_legend_order, kernel_formats};
use crate::summary::{Summary, kernel_of, op_of, saturating_sum};

/// One group (a kernel or an op kind) placed on the roofline.
pub(super) struct RooflineMark {
    name: String,
    calls: u64,
    total_ns: u64,
    bytes: u64,
    flops: u64,
    /// How close it came to its bound, by the kernels' own mix of reads
    /// and writes (see `Placement::share_of_peak`).
    share: Option<PeakShare>,
    /// The format a kernel reads (`q4_k`, `bf16`, `other`); none for an op kind.
    format: Option<&'static str>,
}

impl RooflineMark {
    fn of(row: &Aggregate, share: Option<PeakShare>, format: Option<&'static str>) -> RooflineMark {
        RooflineMark {
            name: row.key.clone(),
            calls: row.calls,
            total_ns: row.total_ns,
            bytes: row.bytes,
            flops: row.flops,
            share,
            format,
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

    /// Hover text: name, the format it reads, calls, µs, GB/s, GFLOP/s,
    /// how close to its bound.
    fn describe(&self) -> String {
        let mut text = self.name.clone();
        if let Some(format) = self.format {
            let _ = write!(text, "\nformat: {format}");
        }
        let _ = write!(
            text,
            "\n{} calls, {:.1} µs in all, {:.2} µs each",
            self.calls,
            self.total_ns as f64 / 1e3,
            self.total_ns as f64 / 1e3 / self.calls.max(1) as f64
        );
        if let Some(gbps) = self.gigabytes() {
            let _ = write!(text, "\n{gbps:.1} GB/s");
        }
        if let Some(gflops) = self.gigaflops() {
            let _ = write!(text, "\n{gflops:.1} GFLOP/s");
        }
        if let Some(share) = self.share {
            let _ = write!(text, "\n{:.1}% of {}", share.percent, share_of_what(share));
        }
        if let Some(intensity) = self.intensity() {
            let _ = write!(text, "\n{intensity:.2} FLOP/B");
        }
        text
    }
}

/// What a share is of, in the hover text's words.
fn share_of_what(share: PeakShare) -> &'static str {
    match share.peak {
        kernelscope::profile::Peak::Bandwidth => {
            "its memory floor (bytes read at the read ceiling + bytes written at the write ceiling)"
        }
        kernelscope::profile::Peak::Compute => "peak compute",
        kernelscope::profile::Peak::Roofline => "its roofline floor",
    }
}

/// The kernels and the op kinds of the summary, heaviest first, each with
/// how close it came to its bound.
pub(super) fn roofline_marks(summary: &Summary<'_>) -> (Vec<RooflineMark>, Vec<RooflineMark>) {
    let formats = kernel_formats(summary);
    let marks = |key: fn(&kernelscope::profile::DispatchRecord) -> String, kernels: bool| {
        let placed = placements(summary.records.iter().copied(), summary.roofline, key);
        summary
            .heaviest_groups(key)
            .iter()
            .map(|row| {
                let share = placed
                    .get(&row.key)
                    .and_then(|placement| placement.share_of_peak(summary.roofline, row));
                let format = formats.get(row.key.as_str()).copied();
                RooflineMark::of(row, share, kernels.then(|| format.unwrap_or(OTHER)))
            })
            .collect::<Vec<_>>()
    };
    (marks(kernel_of, true), marks(op_of, false))
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
    pub fn of(kernels: &[RooflineMark], ops: &[RooflineMark], roofline: Roofline) -> Option<RooflineRange> {
        let placed: Vec<(f64, f64)> = kernels
            .iter()
            .chain(ops)
            .filter_map(|mark| Some((mark.intensity()?, mark.gigaflops()?)))
            .collect();
        if placed.is_empty() {
            return None;
        }
        let ridge = roofline.ridge_point();
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
            .max(roofline.peak_compute_gflops().unwrap_or(0.0) * 1.5);
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
    roofline: Roofline,
    shared: Option<RooflineRange>,
) {
    // Nothing of this run to place: no chart, even on a shared extent.
    let own = RooflineRange::of(kernels, ops, roofline);
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
        plot.ceilings(out, roofline);
        plot.marks(out, kernels, ops);
        out.push_str("</svg>");
    } else {
        out.push_str(r#"<p class="empty">No kernel declares both flops and bytes: nothing to place on the roofline.</p>"#);
    }
    format_legend(out, kernels);
    bandwidth_bars(out, kernels);
}

/// The formats the kernels read, each with its colour, in legend order.
fn format_legend(out: &mut String, kernels: &[RooflineMark]) {
    let formats = in_legend_order(kernels.iter().filter_map(|mark| mark.format));
    if formats.is_empty() {
        return;
    }
    out.push_str(r#"<p class="legend formats">format each kernel declares it reads: "#);
    for format in formats {
        let _ = write!(
            out,
            r#"<span class="format-key" data-format="{format}"><i style="background:{}"></i>{format}</span> "#,
            format_colour(format)
        );
    }
    out.push_str("</p>");
}

/// A kernel mark's fill and its `data-format` attribute.
fn format_fill(mark: &RooflineMark) -> (&'static str, &'static str) {
    let format = mark.format.unwrap_or(OTHER);
    (format_colour(format), format)
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
    fn ceilings(&self, out: &mut String, roofline: Roofline) {
        let ridge = roofline.ridge_point();
        let (x_min, x_max) = (self.x_axis.low(), self.x_axis.high());
        let (y_min, y_max) = (self.y_axis.low(), self.y_axis.high());
        if let Some((gbps, basis)) = roofline.bandwidth().filter(|(peak, _)| *peak > 0.0) {
            let end = ridge.unwrap_or(x_max).min(x_max).min(y_max / gbps);
            let start = x_min.max(y_min / gbps);
            if start < end {
                let _ = write!(
                    out,
                    r##"<line class="ceiling bandwidth" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#c0392b" stroke-width="2"><title>{} ceiling {gbps:.1} GB/s</title></line>"##,
                    self.x(start),
                    self.y(start * gbps),
                    self.x(end),
                    self.y(end * gbps),
                    basis.name()
                );
            }
        }
        if let Some(gflops) = roofline
            .peak_compute_gflops()
            .filter(|peak| *peak > 0.0 && *peak <= y_max)
        {
            let start = ridge.unwrap_or(x_min).max(x_min);
            let _ = write!(
                out,
                r##"<line class="ceiling compute" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#2c3e50" stroke-width="2"><title>compute ceiling {gflops:.1} GFLOP/s</title></line>"##,
                self.x(start),
                self.y(gflops),
                self.x(x_max),
                self.y(gflops)
            );
        }
    }

    /// A circle per kernel and a square per op kind that can be placed,
    /// their area by share of the time so the heavy ones stand out.
    fn marks(&self, out: &mut String, kernels: &[RooflineMark], ops: &[RooflineMark]) {
        let total = saturating_sum(kernels.iter().map(|mark| mark.total_ns)).max(1);
        for (class, marks) in [("roofline-point", kernels), ("roofline-op", ops)] {
            for mark in marks {
                let (Some(intensity), Some(gflops)) = (mark.intensity(), mark.gigaflops()) else {
                    continue;
                };
                let (cx, cy) = (self.x(intensity), self.y(gflops));
                let title = escape(&mark.describe());
                let name = escape(&mark.name);
                let radius = 3.0 + 12.0 * (mark.total_ns as f64 / total as f64).sqrt();
                if class == "roofline-point" {
                    let (fill, format) = format_fill(mark);
                    let _ = write!(
                        out,
                        r##"<circle class="{class}" data-name="{name}" data-format="{format}" cx="{cx:.1}" cy="{cy:.1}" r="{radius:.1}" fill="{fill}" fill-opacity="0.7" stroke="#333" stroke-opacity="0.7"><title>{title}</title></circle>"##
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

/// Kernels that declare bytes but no flops: how close each came to its
/// memory floor as a bar (or, with no ceiling known, its bandwidth against
/// the fastest of them).
fn bandwidth_bars(out: &mut String, kernels: &[RooflineMark]) {
    let memory: Vec<&RooflineMark> = kernels.iter().filter(|mark| mark.intensity().is_none()).collect();
    if memory.is_empty() {
        return;
    }
    let fastest = memory
        .iter()
        .filter_map(|mark| mark.gigabytes())
        .fold(1.0, f64::max);
    let row = 18.0;
    let frame = Frame {
        width: 760.0,
        height: 30.0 + row * memory.len() as f64,
        left: 250.0,
        right: 90.0,
        top: 8.0,
        bottom: 22.0,
    };
    out.push_str(r#"<h3>Kernels without flops: how close each came to its memory floor</h3>"#);
    frame.open(
        out,
        "bandwidth",
        "achieved bandwidth of the kernels that declare no flops",
    );
    for (position, mark) in memory.iter().enumerate() {
        let top = frame.top + row * position as f64 + 2.0;
        let gbps = mark.gigabytes().unwrap_or(0.0);
        let (fraction, share) = match mark.share {
            Some(share) => (share.percent / 100.0, format!("{:.1}%", share.percent)),
            None => (gbps / fastest, format!("{gbps:.0} GB/s")),
        };
        let width = fraction.clamp(0.0, 1.0) * frame.plot_width();
        let (fill, format) = format_fill(mark);
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" class="label" text-anchor="end">{}</text><rect class="bandwidth-bar" data-name="{}" data-format="{format}" x="{:.1}" y="{top:.1}" width="{width:.1}" height="{:.1}" fill="{fill}"><title>{}</title></rect><text x="{:.1}" y="{:.1}" class="label">{share}</text>"##,
            frame.left - 6.0,
            top + 11.0,
            escape(&shorten(&mark.name, 38)),
            escape(&mark.name),
            frame.left,
            row - 4.0,
            escape(&mark.describe()),
            frame.left + width + 4.0,
            top + 11.0
        );
    }
    out.push_str("</svg>");
}
