//! A profile whose feed-forward kernel was timed inside by its phases, as
//! the renderings show it: each phase its own kernel row marked `†` with
//! the note saying what the mark means, calls that count launches, the
//! table of phases with the time blocks waited at each barrier, the same
//! on the HTML page, the trace's slices per phase; and a profile without
//! such kernels shows none of it.

mod common;

use common::{row_keys, table_row};
use kernelscope::testing::in_kernel::{FEED_FORWARD_KERNEL, synthetic_in_kernel_profile};
use kernelscope::testing::synthetic_profile;
use kernelscope_report::{ReportOptions, chrome_trace, render_html, render_report, render_report_with};

const TOKENS: u32 = 4;
const LAYERS: usize = 3;

const PHASES: [&str; 4] = ["norm", "gate/up", "quantize", "down"];

fn phase_row(phase: &str) -> String {
    format!("{FEED_FORWARD_KERNEL} · {phase} †")
}

#[test]
fn each_phase_is_a_marked_kernel_row_whose_calls_are_the_launches() {
    let profile = synthetic_in_kernel_profile(TOKENS, LAYERS, 1);
    let report = render_report(&profile);
    let launches = (u64::from(TOKENS) * LAYERS as u64).to_string();
    for phase in PHASES {
        let row = table_row(&report, "per kernel, over", &phase_row(phase));
        assert_eq!(row[1], launches, "{phase}: calls in\n{report}");
    }
    assert!(
        report.contains("†: measured inside the kernel by %globaltimer stamps"),
        "{report}"
    );
    // The per-layer rows count each layer's attention and feed-forward once a token.
    let layer = table_row(&report, "per layer, over", "layer.1");
    assert_eq!(layer[1], (2 * TOKENS).to_string(), "{report}");
    // Its phases' op kinds make the per-op table.
    for op in ["RmsNorm", "MatVec", "Other", "Attention"] {
        assert!(
            row_keys(&report, "per op, over").iter().any(|key| key == op),
            "{op}: {report}"
        );
    }
}

#[test]
fn the_table_of_phases_shows_each_phase_per_launch_and_its_wait_at_the_barrier() {
    let profile = synthetic_in_kernel_profile(TOKENS, LAYERS, 2);
    let report = render_report_with(&profile, ReportOptions::SHORT);
    let rows = row_keys(&report, "inside the kernels, over");
    let expected: Vec<String> = PHASES.iter().map(|phase| phase_row(phase)).collect();
    assert_eq!(rows, expected, "{report}");
    assert!(report.contains("waiting at barrier µs"), "{report}");
    let mut shares = 0.0;
    for phase in PHASES {
        let row = table_row(&report, "inside the kernels, over", &phase_row(phase));
        assert_eq!(row[1], (u64::from(TOKENS) * LAYERS as u64).to_string());
        shares += row[4].trim_end_matches('%').parse::<f64>().expect("a share");
        let waiting: f64 = row[5].parse().expect("µs");
        assert_eq!(
            waiting > 0.0,
            phase != "down",
            "{phase}: only the barriers wait\n{report}"
        );
    }
    assert!(
        (shares - 100.0).abs() < 0.3,
        "the phases make up the launch: {shares}"
    );
}

#[test]
fn the_page_marks_the_phases_and_the_trace_has_a_slice_per_phase() {
    let profile = synthetic_in_kernel_profile(TOKENS, LAYERS, 3);
    let page = render_html(&profile);
    assert!(page.contains("Inside the kernels, over"), "no table of phases");
    assert!(page.contains(&format!("<td>{FEED_FORWARD_KERNEL} · gate/up †</td>")));
    assert!(page.contains("†: measured inside the kernel by %globaltimer stamps"));
    let trace = chrome_trace(&profile);
    let slices: Vec<&serde_json::Value> = trace["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|event| event["args"]["in_kernel"].is_object())
        .collect();
    assert_eq!(slices.len(), TOKENS as usize * LAYERS * PHASES.len());
    assert_eq!(
        slices[1]["name"].as_str(),
        Some(format!("{FEED_FORWARD_KERNEL} · gate/up").as_str())
    );
    assert_eq!(slices[1]["args"]["in_kernel"]["phase"], "gate/up");
}

#[test]
fn a_profile_without_phases_shows_none_of_it() {
    let profile = synthetic_profile(4, 1.0, 4);
    for rendered in [
        render_report(&profile),
        render_report_with(&profile, ReportOptions::SHORT),
        render_html(&profile),
        chrome_trace(&profile).to_string(),
    ] {
        for needle in [
            "†",
            "inside the kernels",
            "Inside the kernels",
            "in_kernel",
            " · ",
        ] {
            assert!(
                !rendered.contains(needle),
                "`{needle}` in a profile without phases"
            );
        }
    }
}
