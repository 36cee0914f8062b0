//! The gap account as one page: a chart read in five seconds (each role's
//! µs per decode token for both engines side by side, sorted by their
//! difference, the difference written at the end of each pair), the
//! per-layer difference as bars, the account's text, then each run's
//! views side by side.

use std::fmt::Write;

use kernelscope::profile::{GapAccount, Profile};

use super::markup::escape;
use super::page::{PERFETTO, page};
use super::run::{SharedScales, conditions, headline, views};
use crate::summary::Summary;
use crate::text::render_gap_account;

const LABEL_WIDTH: f64 = 260.0;
const PLOT_WIDTH: f64 = 520.0;
const BAR: f64 = 11.0;
const BASE_COLOUR: &str = "#4e79a7";
const NEW_COLOUR: &str = "#f28e2b";

/// The account of `new` against `base` as a self-contained HTML page;
/// `names` label the two runs.
pub fn render_gap_html(base: &Profile, new: &Profile, account: &GapAccount, names: (&str, &str)) -> String {
    let mut body = String::new();
    let title = format!(
        "kernelscope gap account: {} vs {}",
        account.base.program, account.new.program
    );
    let _ = write!(body, "<h1>{}</h1>", escape(&title));
    let difference = account.total.new_us_per_token - account.total.base_us_per_token;
    let _ = write!(
        body,
        r#"<p class="headline">per decode token: {} {:.1} µs, {} {:.1} µs ({:+.1} µs, {:+.1}%)</p>"#,
        escape(&account.base.program),
        account.total.base_us_per_token,
        escape(&account.new.program),
        account.total.new_us_per_token,
        difference,
        if account.total.base_us_per_token > 0.0 {
            100.0 * difference / account.total.base_us_per_token
        } else {
            0.0
        }
    );
    body.push_str("<h2>Where the time goes, per role</h2>");
    role_chart(&mut body, account);
    body.push_str("<h2>Per-layer difference</h2>");
    layer_chart(&mut body, account);
    let _ = write!(
        body,
        "<details open><summary>The account</summary><pre>{}</pre></details>",
        escape(&render_gap_account(account))
    );
    body.push_str(r#"<div class="side-by-side">"#);
    for (name, profile) in [(names.0, base), (names.1, new)] {
        let _ = write!(body, r#"<div class="run"><h1>{}</h1>"#, escape(name));
        headline(&mut body, profile);
        conditions(&mut body, profile);
        views(&mut body, profile, &Summary::of(profile), SharedScales::default());
        body.push_str("</div>");
    }
    body.push_str("</div>");
    body.push_str(PERFETTO);
    page(&title, &body)
}

/// Both engines' bars per role (and idle), sorted by difference.
fn role_chart(out: &mut String, account: &GapAccount) {
    let mut rows: Vec<(String, f64, f64)> = account
        .roles
        .iter()
        .map(|row| (row.role.clone(), row.base_us_per_token, row.new_us_per_token))
        .collect();
    rows.push((
        "idle inside a token".into(),
        account.idle.base_us_per_token,
        account.idle.new_us_per_token,
    ));
    rows.sort_by(|a, b| (b.2 - b.1).abs().total_cmp(&(a.2 - a.1).abs()));
    let most = rows
        .iter()
        .map(|row| row.1.max(row.2))
        .fold(0.0, f64::max)
        .max(1e-9);
    let row_height = 2.0 * BAR + 8.0;
    let height = 30.0 + row_height * rows.len() as f64;
    let width = LABEL_WIDTH + PLOT_WIDTH + 90.0;
    let _ = write!(
        out,
        r#"<svg class="chart gap-roles" role="img" aria-label="µs per decode token by role, both runs" width="{width}" height="{height}" viewBox="0 0 {width} {height}">"#
    );
    let _ = write!(
        out,
        r#"<rect x="{LABEL_WIDTH}" y="4" width="10" height="10" fill="{BASE_COLOUR}"/><text x="{}" y="13" font-size="11">{}</text><rect x="{}" y="4" width="10" height="10" fill="{NEW_COLOUR}"/><text x="{}" y="13" font-size="11">{}</text>"#,
        LABEL_WIDTH + 14.0,
        escape(&account.base.program),
        LABEL_WIDTH + 180.0,
        LABEL_WIDTH + 194.0,
        escape(&account.new.program)
    );
    for (position, (role, base, new)) in rows.iter().enumerate() {
        let y = 26.0 + row_height * position as f64;
        let _ = write!(
            out,
            r#"<text class="role" x="{}" y="{}" text-anchor="end" font-size="12">{}</text>"#,
            LABEL_WIDTH - 6.0,
            y + BAR + 2.0,
            escape(role)
        );
        for (offset, value, colour, side) in [
            (0.0, base, BASE_COLOUR, &account.base.program),
            (BAR, new, NEW_COLOUR, &account.new.program),
        ] {
            let _ = write!(
                out,
                r#"<rect class="bar" x="{LABEL_WIDTH}" y="{}" width="{:.1}" height="{BAR}" fill="{colour}"><title>{}: {} {:.1} µs per token</title></rect>"#,
                y + offset,
                PLOT_WIDTH * value / most,
                escape(role),
                escape(side),
                value
            );
        }
        let _ = write!(
            out,
            r#"<text x="{}" y="{}" font-size="11">{:+.1} µs</text>"#,
            LABEL_WIDTH + PLOT_WIDTH * base.max(*new) / most + 6.0,
            y + BAR + 2.0,
            new - base
        );
    }
    out.push_str("</svg>");
}

/// One bar per layer (and the work outside them): new minus base.
fn layer_chart(out: &mut String, account: &GapAccount) {
    let rows: Vec<(String, f64)> = account
        .per_layer
        .iter()
        .map(|layer| {
            (
                layer.layer.clone(),
                layer.new_us_per_token - layer.base_us_per_token,
            )
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    let most = rows.iter().map(|row| row.1.abs()).fold(0.0, f64::max).max(1e-9);
    let slot = (720.0 / rows.len() as f64).clamp(6.0, 40.0);
    let (width, height, middle) = (slot * rows.len() as f64 + 20.0, 180.0, 90.0);
    let _ = write!(
        out,
        r#"<svg class="chart gap-layers" role="img" aria-label="new minus base µs per decode token, per layer" width="{width}" height="{height}" viewBox="0 0 {width} {height}"><line x1="10" x2="{}" y1="{middle}" y2="{middle}" stroke="grey"/>"#,
        width - 10.0
    );
    for (position, (layer, difference)) in rows.iter().enumerate() {
        let length = 80.0 * difference.abs() / most;
        let y = if *difference >= 0.0 {
            middle - length
        } else {
            middle
        };
        let colour = if *difference > 0.0 {
            NEW_COLOUR
        } else {
            BASE_COLOUR
        };
        let _ = write!(
            out,
            r#"<rect class="bar" x="{:.1}" y="{y:.1}" width="{:.1}" height="{length:.1}" fill="{colour}"><title>{}: {:+.1} µs per token (new − base)</title></rect>"#,
            10.0 + slot * position as f64 + 1.0,
            (slot - 2.0).max(1.0),
            escape(layer),
            difference
        );
    }
    out.push_str("</svg>");
}
