//! Tests that a profile holding kernels split into phases stays truthful
//! downstream: it validates and reads back, a launch counts once wherever
//! launches are counted (groups, idle, the gap account), roles and layers
//! get the phases' time, and a comparison compares the phases.

use std::collections::HashMap;

use crate::profile::{
    DispatchRecord, Profile, Role, Roles, Verdict, aggregate, compare, gap_account, idle_before_by,
    idle_gaps, layer_of, phase_totals,
};
use crate::testing::in_kernel::{FEED_FORWARD_KERNEL, synthetic_in_kernel_profile};

const TOKENS: u32 = 5;
const LAYERS: usize = 3;

fn profile(seed: u64) -> Profile {
    synthetic_in_kernel_profile(TOKENS, LAYERS, seed)
}

fn launches() -> u64 {
    u64::from(TOKENS) * LAYERS as u64
}

fn reread(profile: &Profile) -> Result<Profile, String> {
    Profile::from_json(&profile.to_json(), std::path::Path::new("phases.json"))
        .map_err(|error| error.to_string())
}

#[test]
fn a_profile_of_phases_validates_reads_back_and_keeps_its_idle_account() {
    let profile = profile(1);
    assert_eq!(reread(&profile).as_ref(), Ok(&profile));
    for submission in &profile.submissions {
        let idle = submission.idle.expect("every launch of it was timed");
        assert_eq!(idle.span_ns(), submission.duration_ns());
        let busy: u64 = profile
            .dispatches
            .iter()
            .filter(|record| record.submission == submission.submission)
            .map(DispatchRecord::duration_ns)
            .sum();
        assert_eq!(idle.busy_ns, busy, "the phases tile their launches: no overlap");
    }
}

/// A change made to a profile at the position of its first phase record,
/// to see it refused.
type Edit = fn(&mut Profile, usize);

#[test]
fn a_slot_holds_one_record_or_each_phase_of_one_launch_once() {
    let base = profile(2);
    let first_phase = base
        .dispatches
        .iter()
        .position(|record| record.in_kernel.is_some())
        .expect("a phase");
    let edits: [(&str, Edit); 4] = [
        ("is also", |profile, first_phase| {
            let again = profile.dispatches[first_phase + 1].clone();
            profile.dispatches.push(again);
        }),
        ("past the 4 phases", |profile, first_phase| {
            if let Some(phase) = &mut profile.dispatches[first_phase].in_kernel {
                phase.index = 4;
            }
        }),
        ("is also", |profile, first_phase| {
            let mut whole = profile.dispatches[first_phase].clone();
            whole.in_kernel = None;
            profile.dispatches.push(whole);
        }),
        ("a launch of 5 phases", |profile, first_phase| {
            if let Some(phase) = &mut profile.dispatches[first_phase + 2].in_kernel {
                phase.phases = 5;
            }
        }),
    ];
    for (problem, edit) in edits {
        let mut edited = base.clone();
        edit(&mut edited, first_phase);
        let refused = reread(&edited).expect_err("refused");
        assert!(refused.contains(problem), "{problem}: {refused}");
    }
}

#[test]
fn a_launch_counts_once_and_its_phases_carry_their_roles_time() {
    let profile = profile(3);
    let by_kernel = aggregate(&profile.dispatches, |record| record.kernel.to_string());
    let feed_forward = by_kernel
        .iter()
        .find(|row| row.key == FEED_FORWARD_KERNEL)
        .expect("the kernel");
    assert_eq!(feed_forward.calls, launches(), "four phases, one launch each");
    for row in aggregate(&profile.dispatches, |record| layer_of(&record.scope)) {
        assert_eq!(
            row.calls,
            2 * u64::from(TOKENS),
            "{}: attention and the feed-forward",
            row.key
        );
    }
    let phases = aggregate(&profile.dispatches, DispatchRecord::kernel_and_phase);
    assert_eq!(phases.len(), 5, "attention and the four phases");
    assert!(phases.iter().all(|row| row.calls == launches()), "{phases:?}");
    let by_role = aggregate(&profile.dispatches, |record| record.roles.describe());
    let time_of = |role: Role| {
        profile
            .dispatches
            .iter()
            .filter(|record| record.roles == Roles::one(role))
            .map(DispatchRecord::duration_ns)
            .sum::<u64>()
    };
    for role in [
        Role::MlpNorm,
        Role::GateUp,
        Role::ActivationQuantization,
        Role::Down,
    ] {
        let row = by_role
            .iter()
            .find(|row| row.key == Roles::one(role).describe())
            .expect("a row per phase's role");
        assert_eq!((row.total_ns, row.calls), (time_of(role), launches()));
        assert!(row.total_ns > 0);
    }
    let launch_time: u64 = profile
        .dispatches
        .iter()
        .filter(|record| record.kernel.as_ref() == FEED_FORWARD_KERNEL)
        .map(DispatchRecord::duration_ns)
        .sum();
    assert_eq!(feed_forward.total_ns, launch_time);
}

#[test]
fn the_idle_before_a_launch_is_its_first_phases_and_counted_once() {
    let profile = profile(4);
    let gaps = idle_gaps(&profile.dispatches, &profile.submissions);
    let rows = idle_before_by(&profile.dispatches, &gaps, DispatchRecord::kernel_and_phase);
    let calls: HashMap<&str, (u64, u64)> = rows
        .iter()
        .map(|(key, calls, idle)| (key.as_str(), (*calls, *idle)))
        .collect();
    let norm = format!("{FEED_FORWARD_KERNEL} · norm");
    assert_eq!(calls[norm.as_str()].0, launches());
    assert!(
        calls[norm.as_str()].1 > 0,
        "the launches start 400 ns after the attention"
    );
    assert!(
        !calls.contains_key(format!("{FEED_FORWARD_KERNEL} · down").as_str()),
        "the later phases waited for nothing: the launch was running"
    );
    let submission_idle: u64 = profile
        .submissions
        .iter()
        .filter_map(|submission| submission.idle)
        .map(|idle| idle.before_ns + idle.between_ns)
        .sum();
    assert_eq!(rows.iter().map(|(_, _, idle)| idle).sum::<u64>(), submission_idle);
}

#[test]
fn the_phase_table_sums_each_phase_over_its_launches() {
    let profile = profile(5);
    let rows = phase_totals(&profile.dispatches);
    let names: Vec<&str> = rows.iter().map(|row| row.phase.as_str()).collect();
    assert_eq!(names, ["norm", "gate/up", "quantize", "down"]);
    let shares: f64 = rows.iter().map(|row| row.share_of_kernel()).sum();
    assert!((shares - 1.0).abs() < 1e-9, "{shares}");
    for row in &rows {
        let records = || {
            profile.dispatches.iter().filter(|record| {
                record
                    .in_kernel
                    .as_ref()
                    .is_some_and(|phase| *phase.phase == *row.phase)
            })
        };
        assert_eq!(row.launches, launches());
        assert_eq!(
            row.total_ns,
            records().map(DispatchRecord::duration_ns).sum::<u64>()
        );
        let waiting: u64 = records()
            .filter_map(|record| record.in_kernel.as_ref())
            .map(|phase| phase.waiting_ns)
            .sum();
        assert_eq!(row.waiting_ns, waiting);
        assert_eq!(row.waiting_ns > 0, row.phase != "down", "down ends at no barrier");
        assert!(row.waiting_share() < 1.0);
    }
    assert!(phase_totals(&crate::testing::synthetic_profile(2, 1.0, 5).dispatches).is_empty());
}

#[test]
fn the_gap_account_gives_each_phase_its_role_row_and_counts_launches() {
    let (base, new) = (profile(6), profile(7));
    let account = gap_account(&base, &new);
    for role in [
        Role::MlpNorm,
        Role::GateUp,
        Role::ActivationQuantization,
        Role::Down,
    ] {
        let row = account
            .roles
            .iter()
            .find(|row| row.roles == Roles::one(role))
            .unwrap_or_else(|| panic!("a row of its own for {role:?}: {:?}", account.roles));
        assert!(row.merged_from.is_empty(), "the phases keep their roles apart");
        assert_eq!(row.base_calls_per_token, LAYERS as f64);
        assert!(row.base_us_per_token > 0.0 && row.new_us_per_token > 0.0);
    }
    let (base_sum, new_sum) = account.sums();
    assert!((base_sum - account.total.base_us_per_token).abs() < 1e-6);
    assert!((new_sum - account.total.new_us_per_token).abs() < 1e-6);
}

#[test]
fn a_comparison_compares_the_phases_and_a_profile_without_any_has_no_phase_rows() {
    let (base, new) = (profile(8), profile(8));
    let comparison = compare(&base, &new, 0.05, false).expect("comparable");
    let phases: Vec<&str> = comparison
        .rows
        .iter()
        .filter(|row| row.section == "phase")
        .map(|row| row.key.as_str())
        .collect();
    let expected: Vec<String> = ["norm", "gate/up", "quantize", "down"]
        .iter()
        .map(|phase| format!("{FEED_FORWARD_KERNEL} · {phase}"))
        .collect();
    assert_eq!(phases, expected);
    assert!(comparison.rows.iter().all(|row| row.verdict == Verdict::Same));
    let plain = crate::testing::synthetic_profile(3, 1.0, 8);
    let comparison = compare(&plain, &plain, 0.05, false).expect("comparable");
    assert!(comparison.rows.iter().all(|row| row.section != "phase"));
}
