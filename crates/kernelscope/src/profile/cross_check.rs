//! The cross-check: do the per-dispatch times add up to the per-submission
//! time they were measured inside? A submission is always at least the sum of
//! its serialised dispatches plus launch gaps; a large drift either way means
//! one of the two clocks is lying, which the report flags as a measurement bug.

use std::collections::HashMap;

use super::Profile;
use super::aggregate::FirstSeen;

/// Drift beyond which the cross-check is flagged (10%).
pub const DRIFT_FLAG_THRESHOLD: f64 = 0.10;

/// The cross-check of one submission label.
#[derive(Clone, Debug, PartialEq)]
pub struct CrossCheck {
    /// The submission label.
    pub label: String,
    /// Submissions compared (those that have dispatch records).
    pub submissions: u64,
    /// Their total submission time.
    pub submission_ns: u64,
    /// The sum of their dispatches' times.
    pub dispatch_sum_ns: u64,
    /// Of the difference, the time from each submission's start to its first
    /// dispatch (e.g. the host still enqueueing while the device waits).
    pub lead_ns: u64,
    /// Of the difference, the time between dispatches and after the last.
    pub gaps_ns: u64,
    /// How many of the submissions were held until the host had enqueued
    /// them, so that their time starts when the device could begin.
    pub device_held: u64,
    /// Host time spent enqueueing the submissions compared.
    pub host_enqueue_ns: u64,
    /// `(submission - dispatch sum) / submission`: positive when time passed
    /// between dispatches, negative when dispatches overlapped or a clock drifted.
    pub drift: f64,
    /// Whether `|drift|` exceeds [`DRIFT_FLAG_THRESHOLD`].
    pub flagged: bool,
}

/// Cross-checks every label that has both submission and dispatch times.
pub fn cross_check(profile: &Profile) -> Vec<CrossCheck> {
    // Per submission: (sum of dispatch times, dispatches timed, first start).
    let mut dispatch_sums: HashMap<u64, (u64, u32, u64)> = HashMap::new();
    for dispatch in &profile.dispatches {
        let entry = dispatch_sums
            .entry(dispatch.submission)
            .or_insert((0, 0, u64::MAX));
        // Saturating throughout: a loaded profile's sums were checked to fit
        // (see `Profile::from_json`); this only keeps a forged in-memory one
        // from wrapping around to a small, plausible number.
        entry.0 = entry.0.saturating_add(dispatch.duration_ns());
        entry.1 = entry.1.saturating_add(1);
        entry.2 = entry.2.min(dispatch.start_ns);
    }
    let mut checks: FirstSeen<CrossCheck> = FirstSeen::new();
    for submission in &profile.submissions {
        // A submission whose dispatches were not all timed (records dropped,
        // or replays without per-dispatch timing) says nothing about drift.
        let Some(&(dispatch_sum, timed, first_start)) = dispatch_sums.get(&submission.submission) else {
            continue;
        };
        if timed != submission.dispatches {
            continue;
        }
        let check = checks.entry(&submission.label, || CrossCheck {
            label: submission.label.to_string(),
            submissions: 0,
            submission_ns: 0,
            dispatch_sum_ns: 0,
            lead_ns: 0,
            gaps_ns: 0,
            device_held: 0,
            host_enqueue_ns: 0,
            drift: 0.0,
            flagged: false,
        });
        check.submissions = check.submissions.saturating_add(1);
        check.device_held = check
            .device_held
            .saturating_add(u64::from(submission.device_held()));
        check.host_enqueue_ns = check.host_enqueue_ns.saturating_add(submission.host_enqueue_ns());
        check.submission_ns = check.submission_ns.saturating_add(submission.duration_ns());
        check.dispatch_sum_ns = check.dispatch_sum_ns.saturating_add(dispatch_sum);
        let lead = first_start
            .saturating_sub(submission.start_ns)
            .min(submission.duration_ns());
        check.lead_ns = check.lead_ns.saturating_add(lead);
        check.gaps_ns = check.gaps_ns.saturating_add(
            submission
                .duration_ns()
                .saturating_sub(lead)
                .saturating_sub(dispatch_sum),
        );
    }
    let mut checks: Vec<CrossCheck> = checks.into_groups().into_iter().map(|(_, check)| check).collect();
    for check in &mut checks {
        check.drift = if check.submission_ns == 0 {
            0.0
        } else {
            (check.submission_ns as f64 - check.dispatch_sum_ns as f64) / check.submission_ns as f64
        };
        check.flagged = check.drift.abs() > DRIFT_FLAG_THRESHOLD;
    }
    checks
}
