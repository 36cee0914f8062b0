//! Idle time inside submissions and the cross-check of the two clocks, on
//! synthetic profiles whose clocks are made to lie in each way the check
//! must catch (a fast clock, a jumped offset, overlapping dispatches) and in
//! the ways it must not flag (idle time, a steady calibration offset,
//! overlap where kernels may start early).

use std::path::Path;

use kernelscope::profile::Profile;
use kernelscope::testing::synthetic_profile;

#[test]
fn idle_inside_submissions_is_measured_and_adds_up() {
    // Synthetic submissions: six dispatches each, 0.5 µs apart, the last
    // followed by 0.5 µs before the submission ends.
    let mut profile = synthetic_profile(3, 1.0, 4);
    for submission in &profile.submissions {
        let idle = submission.idle.expect("every dispatch was timed");
        let busy: u64 = profile
            .dispatches
            .iter()
            .filter(|dispatch| dispatch.submission == submission.submission)
            .map(|dispatch| dispatch.duration_ns())
            .sum();
        assert_eq!(
            (idle.busy_ns, idle.before_ns, idle.between_ns, idle.after_ns),
            (busy, 0, 5 * 500, 500)
        );
        assert_eq!(idle.span_ns(), submission.duration_ns());
    }
    // The device waited 0.8 µs before each submission's first dispatch.
    for submission in &mut profile.submissions {
        submission.start_ns -= 800;
    }
    let profile = profile.with_idle();
    let gaps = kernelscope::profile::idle_gaps(&profile.dispatches, &profile.submissions);
    for dispatch in &profile.dispatches {
        let expected = if dispatch.index == 0 { 800 } else { 500 };
        assert_eq!(
            gaps[&(dispatch.submission, dispatch.index)],
            expected,
            "{dispatch:?}"
        );
    }
    let check = kernelscope::profile::cross_check(&profile)[0].clone();
    assert_eq!(check.idle.before_ns, 3 * 800);
    assert_eq!(check.idle.between_ns, 3 * 5 * 500);
    assert_eq!(check.idle.after_ns, 3 * 500);
    assert_eq!(check.idle.span_ns(), check.submission_ns);
    assert!(!check.flagged, "idle time is reported, never flagged: {check:?}");

    // The JSON keeps each submission's account; one that disagrees with its
    // dispatch records (rounding in another tool, or forged) is recomputed
    // from them on load, as is a profile written before accounts were kept.
    let text = profile.to_json();
    assert!(text.contains("\"between_ns\": 2500"), "{text}");
    assert_eq!(Profile::from_json(&text, Path::new("p.json")).unwrap(), profile);
    let mut forged = profile.clone();
    forged.submissions[1].idle.as_mut().unwrap().between_ns += 1;
    assert_eq!(
        Profile::from_json(&forged.to_json(), Path::new("p.json")).unwrap(),
        profile
    );
    let mut older = profile.clone();
    older
        .submissions
        .iter_mut()
        .for_each(|submission| submission.idle = None);
    assert_eq!(
        Profile::from_json(&older.to_json(), Path::new("p.json")).unwrap(),
        profile
    );
}

/// `profile` with the dispatches of `submission` mapped through `clock`
/// (start and end times), as a lying dispatch clock would record them.
fn skewed(mut profile: Profile, submission: u64, clock: impl Fn(u64) -> u64) -> Profile {
    for dispatch in profile
        .dispatches
        .iter_mut()
        .filter(|dispatch| dispatch.submission == submission)
    {
        dispatch.start_ns = clock(dispatch.start_ns);
        dispatch.end_ns = clock(dispatch.end_ns);
    }
    profile.with_idle()
}

#[test]
fn cross_check_flags_only_clocks_that_disagree() {
    let profile = synthetic_profile(4, 1.0, 1);
    let check = |profile: &Profile| kernelscope::profile::cross_check(profile)[0].clone();
    assert!(!check(&profile).flagged, "{:?}", check(&profile));

    // Idle is not a disagreement: one submission ten times longer than its
    // dispatches is reported, not flagged.
    let mut idle = profile.clone();
    idle.submissions[0].end_ns += 10 * idle.submissions[0].duration_ns();
    let idle = idle.with_idle();
    assert!(
        !check(&idle).flagged && check(&idle).idle_share() > 0.5,
        "{:?}",
        check(&idle)
    );

    // Every dispatch read 10 µs late (the two clocks calibrated 10 µs
    // apart): a steady offset, absorbed and reported, not flagged.
    let mut late = profile.clone();
    for submission in 0..4 {
        late = skewed(late, submission, |ns| ns + 10_000);
    }
    let late_check = check(&late);
    assert!(!late_check.flagged, "{late_check:?}");
    // At least 10 µs less the 0.5 µs after the last dispatch and the clocks' resolution.
    assert!(
        (-10_000..=-8_000).contains(&late_check.largest_alignment_ns),
        "{late_check:?}"
    );

    // A dispatch clock running 20 % fast inside submission 1: its
    // dispatches span longer than it.
    let start = profile.submissions[1].start_ns;
    let fast = skewed(profile.clone(), 1, |ns| start + (ns - start) * 6 / 5);
    let fast_check = check(&fast);
    assert!(
        fast_check.flagged && fast_check.longer_than_span.seen(),
        "{fast_check:?}"
    );
    assert_eq!(fast_check.longer_than_span.first_submission, Some(1));

    // Submission 2's dispatches placed 50 µs late while the others are not:
    // no steady alignment puts them inside it.
    let jumped = skewed(profile.clone(), 2, |ns| ns + 50_000);
    let jumped_check = check(&jumped);
    assert!(
        jumped_check.flagged && jumped_check.outside.seen(),
        "{jumped_check:?}"
    );
    assert_eq!(jumped_check.outside.first_submission, Some(2));
    assert!(jumped_check.outside.worst_ns > 40_000, "{jumped_check:?}");

    // Two dispatches overlapping by 5 µs on the serial stream: flagged,
    // unless kernels may start early (programmatic dependent launch).
    let mut overlapping = profile.clone();
    let second = overlapping
        .dispatches
        .iter_mut()
        .find(|dispatch| dispatch.submission == 3 && dispatch.index == 1)
        .unwrap();
    second.start_ns -= 5_500;
    let overlapping = overlapping.with_idle();
    let overlap_check = check(&overlapping);
    assert!(
        overlap_check.flagged && overlap_check.overlapping.seen(),
        "{overlap_check:?}"
    );
    let mut early = overlapping.clone();
    early.conditions.early_launch = true;
    assert!(!check(&early).flagged, "{:?}", check(&early));
}
