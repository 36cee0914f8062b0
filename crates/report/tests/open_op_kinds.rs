//! Op kinds this build does not know, rendered: a profile written by a
//! newer build (its attention run as `GroupedGemm`, its mat-vecs as a fused
//! `Foo+Bar`, and a kind whose name HTML would read as markup) renders as
//! text, as the HTML page and as a trace with those names kept, and its
//! comparison with itself and with a profile of known kinds renders too.

use std::path::Path;

use kernelscope::profile::{Profile, compare};
use kernelscope::testing::synthetic_layered_profile;
use kernelscope_report::{
    ReportOptions, chrome_trace, render_comparison, render_comparison_html, render_html, render_report_with,
};

/// A known profile, and the same run as a newer build would have written
/// it, read back from its JSON.
fn known_and_newer() -> (Profile, Profile) {
    let known = synthetic_layered_profile(6, 4, &|_| 1.0, 31);
    let mut json: serde_json::Value = serde_json::from_str(&known.to_json()).unwrap();
    for dispatch in json["dispatches"].as_array_mut().unwrap() {
        let renamed = match dispatch["op_kind"].as_str().unwrap() {
            "Attention" => "GroupedGemm",
            "MatVec" => "Foo+Bar",
            "RmsNorm" => "<Norm>&\"Co\"",
            other => other,
        };
        dispatch["op_kind"] = renamed.into();
    }
    let newer = Profile::from_json(&json.to_string(), Path::new("newer.json")).unwrap();
    (known, newer)
}

#[test]
fn unknown_kinds_render_as_text_under_their_names() {
    let (_, newer) = known_and_newer();
    for options in [ReportOptions::SHORT, ReportOptions::FULL] {
        let report = render_report_with(&newer, options);
        for name in ["| GroupedGemm", "| Foo+Bar", "| <Norm>&\"Co\""] {
            assert!(report.contains(name), "missing `{name}` in:\n{report}");
        }
        // The token lines name them too.
        assert!(report.contains("GroupedGemm "), "{report}");
    }
}

#[test]
fn unknown_kinds_render_in_the_page_escaped() {
    let (_, newer) = known_and_newer();
    let page = render_html(&newer);
    assert!(page.contains(r#"data-op="GroupedGemm""#));
    assert!(page.contains(r#"data-op="Foo+Bar""#));
    assert!(page.contains(r#"data-op="&lt;Norm&gt;&amp;&quot;Co&quot;""#));
    assert!(!page.contains("<Norm>"), "a kind's name is never markup");
    assert!(
        page.contains(r#"data-name="GroupedGemm""#),
        "a square on the roofline"
    );
}

#[test]
fn unknown_kinds_keep_their_names_in_the_trace() {
    let (_, newer) = known_and_newer();
    let trace = chrome_trace(&newer);
    let kinds: std::collections::BTreeSet<&str> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["cat"] == "dispatch")
        .filter_map(|event| event["args"]["op_kind"].as_str())
        .collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["<Norm>&\"Co\"", "Foo+Bar", "GroupedGemm"]
    );
}

#[test]
fn unknown_kinds_compare_and_render_against_themselves_and_known_ones() {
    let (known, newer) = known_and_newer();
    let itself = compare(&newer, &newer, 0.05, false).unwrap();
    assert!(!itself.regressed());
    let text = render_comparison(&itself);
    assert!(
        text.contains("GroupedGemm") && text.contains("no regression"),
        "{text}"
    );
    let page = render_comparison_html(&newer, &newer, &itself, ("newer.json", "newer.json"));
    assert!(page.contains("no regression") && page.contains("GroupedGemm"));

    let across = compare(&known, &newer, 0.05, false).unwrap();
    let text = render_comparison(&across);
    let verdict_of = |key: &str| {
        text.lines()
            .find(|line| line.starts_with("| op") && line.contains(&format!("| {key} ")))
            .unwrap_or_else(|| panic!("no op row {key} in:\n{text}"))
            .trim_end_matches('|')
            .rsplit('|')
            .next()
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(verdict_of("GroupedGemm"), "new");
    assert_eq!(verdict_of("Attention"), "gone");
    let page = render_comparison_html(&known, &newer, &across, ("known.json", "newer.json"));
    assert!(page.contains("&lt;Norm&gt;"));
}
