//! Profiles that push the renderers: a forged one whose sums reach 2^64
//! (built in memory, so nothing refused it) renders as text, HTML and a
//! trace without a panic or a wrap-around; one of thousands of scopes
//! renders in reasonable time; a split run shows its ranks; a profile from
//! before the compute peak says the peak is unknown instead of guessing.

use std::path::Path;

use kernelscope::profile::{Enqueue, Profile, Topology, compare};
use kernelscope::testing::synthetic_profile;
use kernelscope_report::{
    chrome_trace, render_comparison, render_comparison_html, render_html, render_report,
};

#[test]
fn a_forged_profile_renders_without_panic_or_wrap() {
    let mut forged = synthetic_profile(3, 1.0, 9);
    for dispatch in &mut forged.dispatches {
        dispatch.start_ns = 0;
        dispatch.end_ns = u64::MAX;
        dispatch.bytes = u64::MAX;
        dispatch.flops = u64::MAX;
    }
    for submission in &mut forged.submissions {
        submission.start_ns = 0;
        submission.end_ns = u64::MAX;
        submission.enqueue = Some(Enqueue {
            host_ns: u64::MAX,
            device_held: true,
        });
    }
    for token in &mut forged.tokens {
        token.start_ns = 0;
        token.end_ns = u64::MAX;
        token.counters.dispatches = u64::MAX;
    }
    let report = render_report(&forged);
    assert!(report.contains("per op"), "{report}");
    assert!(render_html(&forged).contains(r#"<svg class="layers""#));
    assert!(chrome_trace(&forged)["traceEvents"].as_array().unwrap().len() > forged.dispatches.len());
    let comparison = compare(&forged, &forged, 0.05, false).unwrap();
    assert!(render_comparison(&comparison).contains("no regression"));
    assert!(render_comparison_html(&forged, &forged, &comparison, ("a", "b")).contains("no regression"));
}

#[test]
fn a_profile_of_many_tokens_and_scopes_renders_every_scope() {
    // Each dispatch in its own scope, over many tokens. How fast is
    // benches/large_profiles.rs's to say (the token lines once scanned a
    // token's records once per layer).
    let mut many = synthetic_profile(2_000, 1.0, 13);
    for (position, dispatch) in many.dispatches.iter_mut().enumerate() {
        dispatch.scope = format!("layer.{position}.attn").into();
    }
    let loaded = Profile::from_json(&many.to_json(), Path::new("many.json")).unwrap();
    let report = render_report(&loaded);
    assert!(report.contains("layer.11999"));
}

#[test]
fn a_split_run_shows_its_ranks() {
    let topology = Topology {
        ranks: 2,
        devices: vec!["cpu 0".into(), "cpu 1".into()],
        library: "in-process".into(),
        link: "shared memory".into(),
    };
    let split =
        synthetic_profile(3, 1.0, 7).with_ranks(topology, vec![(synthetic_profile(3, 1.0, 8), 1_500)]);
    let report = render_report(&split);
    assert!(report.contains("ranks: 2 ranks over cpu 0, cpu 1"), "{report}");
    let trace = chrome_trace(&split);
    let processes: Vec<&str> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["name"] == "process_name")
        .filter_map(|event| event["args"]["name"].as_str())
        .collect();
    assert_eq!(
        processes,
        [
            "kernelscope rank 0: cpu: synthetic",
            "kernelscope rank 1: cpu: synthetic"
        ]
    );
}

#[test]
fn an_unknown_ceiling_is_said_not_guessed() {
    let mut older = synthetic_profile(3, 1.0, 5);
    older.conditions.ceilings.compute = None;
    let report = render_report(&older);
    assert!(report.contains("compute ceiling unknown"), "{report}");
    assert!(render_html(&older).contains("<td>compute ceiling</td><td>unknown</td>"));
    older.conditions.ceilings = Default::default();
    let report = render_report(&older);
    assert!(report.contains("memory ceiling unknown"), "{report}");
    assert!(render_html(&older).contains("<td>memory ceiling</td><td>unknown</td>"));
}
