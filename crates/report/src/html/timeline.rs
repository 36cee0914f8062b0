//! The per-token timeline: one bar per token of its host wall time, split
//! into the time the device ran dispatches (busy), the time it idled inside
//! the token's submissions (waiting between and around dispatches, where
//! dispatches were timed), and the rest of the token (the host's, outside
//! any submission), with the host's enqueue time as a tick.

use std::collections::HashMap;
use std::fmt::Write;

use kernelscope::profile::{Phase, Profile, TokenRecord};

use super::svg::Frame;

/// The timeline of `profile`'s tokens, or a line saying it marked none.
pub(super) fn token_timeline(out: &mut String, profile: &Profile) {
    if profile.tokens.is_empty() {
        out.push_str(r#"<p class="empty">The run marked no tokens.</p>"#);
        return;
    }
    // Per token: the span of its submissions, the device's busy time in
    // them (the whole span where dispatches were not timed), and the
    // host's enqueue time.
    let mut busy: HashMap<u32, TokenDevice> = HashMap::new();
    for submission in &profile.submissions {
        if let Some(token) = submission.token {
            let entry = busy.entry(token).or_default();
            let span = submission.duration_ns();
            entry.span = entry.span.saturating_add(span);
            entry.busy = entry
                .busy
                .saturating_add(submission.idle.map_or(span, |idle| idle.busy_ns));
            entry.enqueue = entry.enqueue.saturating_add(submission.host_enqueue_ns());
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
    let label_every = (count / 16).max(1);
    for (position, token) in profile.tokens.iter().enumerate() {
        let bar = TokenBar {
            left: frame.left + step * position as f64,
            width: (step * 0.85).max(0.8),
            highest,
            labeled: position % label_every == 0,
        };
        let device = busy.get(&token.index).copied().unwrap_or_default();
        bar.draw(out, &frame, token, device);
    }
    out.push_str("</svg>");
    out.push_str(
        r#"<p class="legend"><span><i style="background:#9467bd"></i>device busy (prefill)</span> <span><i style="background:#4e79a7"></i>device busy (decode)</span> <span><i style="background:#f28e2b"></i>device idle inside submissions</span> <span><i style="background:#d9d9d9"></i>outside submissions (host)</span> <span><i style="background:#e15759"></i>host enqueue (tick height)</span> <span><i style="border:1px dashed #bbbbbb"></i>not timed (--profile-tokens)</span></p>"#,
    );
}

/// One token's device time: its submissions' span, the part of it the
/// device was busy, and the host's enqueue time (ns).
#[derive(Clone, Copy, Debug, Default)]
struct TokenDevice {
    span: u64,
    busy: u64,
    enqueue: u64,
}

/// Where one token's bar goes and how tall time is.
struct TokenBar {
    left: f64,
    width: f64,
    /// The ns the plot's full height stands for.
    highest: f64,
    /// Whether the token's number is written below it.
    labeled: bool,
}

impl TokenBar {
    /// The bar of `token` and its `device` time, with its hover text.
    fn draw(&self, out: &mut String, frame: &Frame, token: &TokenRecord, device: TokenDevice) {
        let (left, width) = (self.left, self.width);
        let base = frame.top + frame.plot_height();
        let wall = token.duration_ns();
        let span = device.span.min(wall);
        let busy = device.busy.min(span);
        let height = |ns: u64| ns as f64 / self.highest * frame.plot_height();
        if !token.timed {
            // Left out by --profile-tokens: its wall time only, not read as
            // time outside submissions.
            let _ = write!(
                out,
                r##"<g class="token-bar" data-token="{}"><rect class="untimed" x="{left:.1}" y="{:.1}" width="{width:.1}" height="{:.1}" fill="none" stroke="#bbbbbb" stroke-dasharray="2,2"/><title>token {} ({:?}): {:.3} ms, not timed (--profile-tokens); {} dispatches, {} syncs</title></g>"##,
                token.index,
                base - height(wall),
                height(wall),
                token.index,
                token.phase,
                wall as f64 / 1e6,
                token.counters.dispatches,
                token.counters.syncs
            );
            return;
        }
        let colour = match token.phase {
            Phase::Prefill => "#9467bd",
            Phase::Decode => "#4e79a7",
        };
        let _ = write!(
            out,
            r##"<g class="token-bar" data-token="{}"><rect class="host" x="{left:.1}" y="{:.1}" width="{width:.1}" height="{:.1}" fill="#d9d9d9"/><rect class="idle" x="{left:.1}" y="{:.1}" width="{width:.1}" height="{:.1}" fill="#f28e2b"/><rect class="busy" x="{left:.1}" y="{:.1}" width="{width:.1}" height="{:.1}" fill="{colour}"/>"##,
            token.index,
            base - height(wall),
            height(wall) - height(span),
            base - height(span),
            height(span) - height(busy),
            base - height(busy),
            height(busy)
        );
        if device.enqueue > 0 {
            let _ = write!(
                out,
                r##"<rect class="enqueue" x="{left:.1}" y="{:.1}" width="{width:.1}" height="2" fill="#e15759"/>"##,
                base - height(device.enqueue.min(wall)) - 1.0
            );
        }
        let _ = write!(
            out,
            r#"<title>token {} ({:?}): {:.3} ms; device busy {:.3} ms ({:.1}%), idle inside submissions {:.3} ms, outside them {:.3} ms; host enqueue {:.3} ms; {} dispatches, {} syncs</title></g>"#,
            token.index,
            token.phase,
            wall as f64 / 1e6,
            busy as f64 / 1e6,
            100.0 * busy as f64 / wall.max(1) as f64,
            (span - busy) as f64 / 1e6,
            (wall - span) as f64 / 1e6,
            device.enqueue as f64 / 1e6,
            token.counters.dispatches,
            token.counters.syncs
        );
        if self.labeled {
            let _ = write!(
                out,
                r#"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="middle">{}</text>"#,
                left + width / 2.0,
                base + 14.0,
                token.index
            );
        }
    }
}
