//! The report as one self-contained HTML page: inline SVG charts (roofline,
//! per-layer bars, per-token timeline, a mixture of experts' heatmaps), the tables of the text report, and
//! for two runs the comparison with its verdicts coloured, both runs' views
//! side by side. No network and no files beside it: the styles and the
//! little script are in the page, and a content security policy forbids it
//! any request, so it opens the same offline, from a mail or an archive.
//!
//! `tests/html_report.rs` opens pages in headless Chromium with the network
//! off and checks the DOM, where the script has counted errors and loaded
//! resources (`data-errors`, `data-resources` on `<html>`). The screenshots
//! in `docs/images` are such pages of real runs, taken with `chromium
//! --headless --screenshot`.

mod comparison;
mod deltas;
mod experts;
mod gap;
mod layers;
mod markup;
mod page;
mod ranks;
mod roofline;
mod run;
mod svg;
mod timeline;

use std::fmt::Write;

use kernelscope::profile::Profile;

pub use comparison::render_comparison_html;
pub use gap::render_gap_html;

use crate::summary::Summary;
use crate::text::{ReportOptions, render_report_with};
use markup::escape;
use page::{PERFETTO, page};
use run::{SharedScales, conditions, headline, views};

/// `profile` as one self-contained HTML page.
pub fn render_html(profile: &Profile) -> String {
    let mut body = String::new();
    let title = format!(
        "kernelscope profile: {}",
        profile
            .conditions
            .model
            .as_deref()
            .unwrap_or(&profile.conditions.device)
    );
    let _ = write!(body, "<h1>{}</h1>", escape(&title));
    headline(&mut body, profile);
    conditions(&mut body, profile);
    views(&mut body, profile, &Summary::of(profile), SharedScales::default());
    body.push_str(PERFETTO);
    let _ = write!(
        body,
        r#"<details><summary>The full text report</summary><pre>{}</pre></details>"#,
        escape(&render_report_with(profile, ReportOptions::FULL))
    );
    page(&title, &body)
}
