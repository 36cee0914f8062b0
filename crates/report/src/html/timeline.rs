//! The per-token timeline: one bar per token of its host wall time, split
//! into the time its submissions kept the device busy and the rest (idle),
//! with the host's enqueue time as a tick.

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
    // Per token: device time of its submissions, and the host's enqueue time.
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
    let label_every = (count / 16).max(1);
    for (position, token) in profile.tokens.iter().enumerate() {
        let bar = TokenBar {
            left: frame.left + step * position as f64,
            width: (step * 0.85).max(0.8),
            highest,
            labeled: position % label_every == 0,
        };
        let (device, enqueue) = busy.get(&token.index).copied().unwrap_or((0, 0));
        bar.draw(out, &frame, token, device, enqueue);
    }
    out.push_str("</svg>");
    out.push_str(
        r#"<p class="legend"><span><i style="background:#9467bd"></i>device busy (prefill)</span> <span><i style="background:#4e79a7"></i>device busy (decode)</span> <span><i style="background:#d9d9d9"></i>device idle</span> <span><i style="background:#e15759"></i>host enqueue (tick height)</span></p>"#,
    );
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
    /// The bar of `token`, its device busy `device` ns (at most its wall
    /// time) and its host enqueue `enqueue` ns, with its hover text.
    fn draw(&self, out: &mut String, frame: &Frame, token: &TokenRecord, device: u64, enqueue: u64) {
        let (left, width) = (self.left, self.width);
        let base = frame.top + frame.plot_height();
        let wall = token.duration_ns();
        let device = device.min(wall);
        let height = |ns: u64| ns as f64 / self.highest * frame.plot_height();
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
