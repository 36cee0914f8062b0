//! The frame every HTML page shares (its policy, script and styles, and
//! the note that points to the trace): a file of its own, so that the
//! comparison and gap pages use it without importing the run's page.

use super::markup::escape;

const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");

/// The page around `body`: its policy, script and styles.
pub(super) fn page(title: &str, body: &str) -> String {
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{}</title>
<script>{SCRIPT}</script>
<style>{STYLE}</style>
</head>
<body>
<ul id="page-errors"></ul>
{body}
</body>
</html>
"#,
        escape(title)
    )
}

/// Where to look for the timeline of every dispatch: the trace, which the
/// page does not hold.
pub(super) const PERFETTO: &str = r#"<h2>Trace</h2><p class="note">For the timeline of every dispatch, write a Chrome trace with <code>kscope run --trace FILE</code> (or <code>kscope report PROFILE --trace FILE</code>; <code>--trace-tokens 10..12</code> keeps a long run's trace small) and open it at <a href="https://ui.perfetto.dev">ui.perfetto.dev</a> (Open trace file: it is read in the browser, not uploaded) or in <code>chrome://tracing</code>.</p>"#;
