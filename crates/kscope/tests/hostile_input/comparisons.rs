//! Comparisons that would pass for the wrong reason: a negative threshold
//! clap reads as a flag, profiles that hold no time at all, a profile
//! command without a program.

use std::path::PathBuf;

use kernelscope::testing::synthetic_profile;

use crate::common::kscope;

/// A folder of this test's own, emptied first.
fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kscope-comparisons-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_negative_threshold_is_refused_as_a_value() {
    let dir = folder("negative-threshold");
    let base = dir.join("base.json");
    std::fs::write(&base, synthetic_profile(4, 1.0, 5).to_json()).unwrap();
    let base = base.to_str().unwrap();
    let (code, _, stderr) = kscope(&["compare", "--threshold", "-5%", base, base]);
    assert_eq!(code, 2, "{stderr}");
    // Not clap's tip to write `-- -5`, which does not work here.
    assert!(!stderr.contains("-- -5"), "{stderr}");
    assert!(
        stderr.contains("-5%") && stderr.contains("non-negative"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_profile_without_timed_work_is_refused_not_passed() {
    let dir = folder("untimed");
    let timed = synthetic_profile(6, 1.0, 9);
    let base = dir.join("base.json");
    std::fs::write(&base, timed.to_json()).unwrap();
    // Every duration 0: tokens, submissions and dispatches end where they start.
    let mut zero = timed.clone();
    for token in &mut zero.tokens {
        token.end_ns = token.start_ns;
    }
    for submission in &mut zero.submissions {
        submission.end_ns = submission.start_ns;
        submission.idle = None;
    }
    for dispatch in &mut zero.dispatches {
        dispatch.end_ns = dispatch.start_ns;
    }
    // And nothing at all.
    let mut empty = timed.clone();
    empty.tokens.clear();
    empty.submissions.clear();
    empty.dispatches.clear();
    let base = base.to_str().unwrap();
    for (name, profile) in [("zero.json", &zero), ("empty.json", &empty)] {
        let untimed = dir.join(name);
        std::fs::write(&untimed, profile.to_json()).unwrap();
        let untimed = untimed.to_str().unwrap();
        for (args, side) in [([base, untimed], "new"), ([untimed, base], "base")] {
            let (code, stdout, stderr) = kscope(&["compare", args[0], args[1]]);
            assert_eq!(code, 2, "{name} as {side}: {stdout}{stderr}");
            assert!(
                stderr.contains(&format!("the {side} profile holds no timed work")) || stderr.contains(name),
                "{name} as {side}: {stderr}"
            );
            assert!(!stdout.contains("no regression"), "{stdout}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn profile_without_a_command_says_what_is_missing() {
    let (code, _, stderr) = kscope(&["profile"]);
    assert_eq!(code, 2);
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains("<CMD>"), "{stderr}");
}
