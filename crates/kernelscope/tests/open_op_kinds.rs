//! Op kinds this build does not know: a profile written by a newer build
//! (here, one whose attention ran as `GroupedGemm` and whose mat-vecs as a
//! fused `Foo+Bar`) loads with those names kept, writes them back the same,
//! and compares against itself and against a profile of known kinds. The
//! renderings of such a profile are tested in kernelscope-report.

use std::path::Path;

use kernelscope::profile::{Profile, Verdict, compare};
use kernelscope::testing::synthetic_profile;
use kernelscope::{OpKind, Primitive};

/// `profile` as a newer build would have written it: `Attention` renamed
/// `GroupedGemm` and `MatVec` renamed `Foo+Bar`, in the JSON itself.
fn with_newer_kinds(profile: &Profile) -> String {
    let mut json: serde_json::Value = serde_json::from_str(&profile.to_json()).unwrap();
    for dispatch in json["dispatches"].as_array_mut().unwrap() {
        let renamed = match dispatch["op_kind"].as_str().unwrap() {
            "Attention" => "GroupedGemm",
            "MatVec" => "Foo+Bar",
            other => other,
        };
        dispatch["op_kind"] = renamed.into();
    }
    serde_json::to_string_pretty(&json).unwrap()
}

#[test]
fn a_profile_of_unknown_kinds_loads_and_keeps_their_names() {
    let known = synthetic_profile(6, 1.0, 5);
    let text = with_newer_kinds(&known);
    let newer = Profile::from_json(&text, Path::new("newer.json")).unwrap();
    let kinds: Vec<OpKind> = newer.dispatches.iter().map(|record| record.op_kind).collect();
    let grouped = kinds.iter().find(|kind| kind.name() == "GroupedGemm").unwrap();
    assert!(!grouped.is_known() && !grouped.is_fused() && grouped.covers().is_empty());
    let fused = kinds.iter().find(|kind| kind.name() == "Foo+Bar").unwrap();
    assert!(!fused.is_known() && fused.is_fused());
    assert!(kinds.contains(&OpKind::RmsNorm), "known kinds stay known");
    // Written back, the same names: nothing is lost on the way through.
    let again = Profile::from_json(&newer.to_json(), Path::new("again.json")).unwrap();
    assert_eq!(again, newer);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&newer.to_json()).unwrap(),
        serde_json::from_str::<serde_json::Value>(&text).unwrap()
    );
}

#[test]
fn unknown_kinds_compare_by_name() {
    let known = synthetic_profile(6, 1.0, 5);
    let newer = Profile::from_json(&with_newer_kinds(&known), Path::new("newer.json")).unwrap();
    let itself = compare(&newer, &newer, 0.05, false).unwrap();
    assert!(!itself.regressed());
    let op = |comparison: &kernelscope::profile::Comparison, key: &str| {
        comparison
            .rows
            .iter()
            .find(|row| row.section == "op" && row.key == key)
            .map(|row| row.verdict)
    };
    assert_eq!(op(&itself, "GroupedGemm"), Some(Verdict::Same));
    assert_eq!(op(&itself, "Foo+Bar"), Some(Verdict::Same));
    // Against the known run: the renamed kinds are new, the old ones gone,
    // the rest compared as ever.
    let across = compare(&known, &newer, 0.05, false).unwrap();
    assert_eq!(op(&across, "GroupedGemm"), Some(Verdict::Added));
    assert_eq!(op(&across, "Foo+Bar"), Some(Verdict::Added));
    assert_eq!(op(&across, "Attention"), Some(Verdict::Removed));
    assert_eq!(op(&across, "RmsNorm"), Some(Verdict::Same));
}

#[test]
fn a_fused_kind_no_op_declares_yet_loads_as_its_parts() {
    let known = synthetic_profile(3, 1.0, 6);
    let text = known.to_json().replace("\"RmsNorm\"", "\"RmsNorm+MatVec\"");
    let loaded = Profile::from_json(&text, Path::new("fused.json")).unwrap();
    let fused = OpKind::fused(&[Primitive::RmsNorm, Primitive::MatVec]);
    assert!(loaded.dispatches.iter().any(|record| record.op_kind == fused));
    assert!(fused.is_known() && fused.is_fused());
}

#[test]
fn hostile_op_kind_names_are_refused_saying_why() {
    let known = synthetic_profile(2, 1.0, 7);
    for (bad, problem) in [
        ("", "empty name"),
        (&*"G".repeat(65), "longer than 64 bytes"),
        ("Mat\\u0000Vec", "control character"),
    ] {
        let text = known.to_json().replacen("\"RmsNorm\"", &format!("\"{bad}\""), 1);
        let error = Profile::from_json(&text, Path::new("bad.json")).unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with("bad.json: ") && message.contains(problem),
            "{message}"
        );
        assert!(message.len() < 400, "{message}");
    }
}
