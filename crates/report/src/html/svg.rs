//! What every chart of the page is drawn with: an SVG frame around a plot
//! area with a labeled vertical axis, a log-10 axis over whole decades and
//! its labels, and text cut to fit a label's room.

use std::fmt::Write;

use super::markup::escape;

/// Plot area inside an SVG of `width` × `height`.
pub(super) struct Frame {
    pub width: f64,
    pub height: f64,
    pub left: f64,
    pub right: f64,
    pub top: f64,
    pub bottom: f64,
}

impl Frame {
    /// A vertical axis: a grid line and label at each tick (its fraction of
    /// the plot's height, 0 at the bottom, and its label), and the title.
    pub fn value_axis(&self, out: &mut String, ticks: impl IntoIterator<Item = (f64, String)>, title: &str) {
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

    pub fn plot_width(&self) -> f64 {
        self.width - self.left - self.right
    }

    pub fn plot_height(&self) -> f64 {
        self.height - self.top - self.bottom
    }

    /// Opens the `<svg>` of class `class` (described by `label` for screen
    /// readers) and draws the plot area's background.
    pub fn open(&self, out: &mut String, class: &str, label: &str) {
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
pub(super) struct LogAxis {
    low_decade: i32,
    high_decade: i32,
}

impl LogAxis {
    pub fn covering(low: f64, high: f64) -> LogAxis {
        let low_decade = low.max(f64::MIN_POSITIVE).log10().floor() as i32;
        let high_decade = (high.max(f64::MIN_POSITIVE).log10().ceil() as i32).max(low_decade + 1);
        LogAxis {
            low_decade,
            high_decade,
        }
    }

    /// Position of `value` in 0..1 along the axis.
    pub fn fraction(self, value: f64) -> f64 {
        (value.log10() - f64::from(self.low_decade)) / f64::from(self.high_decade - self.low_decade)
    }

    pub fn decades(self) -> impl Iterator<Item = i32> {
        self.low_decade..=self.high_decade
    }

    /// The value at the axis's start.
    pub fn low(self) -> f64 {
        10f64.powi(self.low_decade)
    }

    /// The value at the axis's end.
    pub fn high(self) -> f64 {
        10f64.powi(self.high_decade)
    }
}

/// `10^k` as a short label: 0.01, 1, 1k, 1M.
pub(super) fn decade_label(decade: i32) -> String {
    match decade {
        d if d < 0 => format!("{}", 10f64.powi(d)),
        0..=2 => format!("{}", 10u64.pow(decade as u32)),
        3..=5 => format!("{}k", 10u64.pow(decade as u32 - 3)),
        6..=8 => format!("{}M", 10u64.pow(decade as u32 - 6)),
        _ => format!("1e{decade}"),
    }
}

/// `text` cut to `most` characters, an ellipsis ending what was cut.
pub(super) fn shorten(text: &str, most: usize) -> String {
    if text.chars().count() <= most {
        text.to_string()
    } else {
        let kept: String = text.chars().take(most - 1).collect();
        format!("{kept}…")
    }
}
