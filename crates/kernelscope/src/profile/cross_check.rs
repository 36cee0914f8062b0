//! The cross-check: do the run's two clocks agree about the same intervals?
//! Each submission is timed by one clock (CUDA event pairs, or the host's)
//! and its dispatches by another (CUPTI's records, or the host's). Where
//! they disagree beyond the clocks' resolution, one of them is wrong, and
//! that is flagged:
//! - the dispatches span longer than the submission they ran in (busy plus
//!   idle would not add up to the span);
//! - dispatches overlap on one serial stream (unless kernels were allowed
//!   to start early, `Conditions::early_launch`);
//! - a submission's dispatches cannot be placed inside it by any alignment
//!   of the two clocks that agrees with the submissions before it (the
//!   clocks' offset jumped rather than drifted: dispatches outside their
//!   submission).
//!
//! Idle time inside submissions is not a disagreement: it is measured and
//! reported (`profile::idle`), never flagged.

use std::collections::HashMap;

use super::aggregate::FirstSeen;
use super::idle::{DispatchShape, dispatches_by_submission};
use super::{Profile, SubmissionIdle, SubmissionRecord};

/// The clocks' resolution at the start of a run, in ns: CUDA event pairs
/// resolve about half a microsecond each, and two clocks each calibrated
/// against the host add their uncertainties.
pub const CLOCK_RESOLUTION_NS: u64 = 1_000;

/// How fast the offset between the two clocks may drift (ns per ns): the
/// device's and the host's oscillators differ by tens of parts per million.
pub const CLOCK_DRIFT_RATE: f64 = 100e-6;

/// The resolution of the submission clock at `start_ns` into the run:
/// [`CLOCK_RESOLUTION_NS`] plus one step of the f32 milliseconds CUDA
/// reports an event's time since the run's first event in (a step of 1 µs
/// after 8 s, 12 µs after 100 s).
pub fn clock_resolution_ns(start_ns: u64) -> u64 {
    CLOCK_RESOLUTION_NS + (start_ns >> 23)
}

/// One kind of disagreement between the clocks over a label's submissions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Disagreement {
    /// Submissions where it was seen.
    pub submissions: u64,
    /// The largest amount beyond the clocks' resolution (ns).
    pub worst_ns: u64,
    /// The number of the first submission where it was seen.
    pub first_submission: Option<u64>,
}

impl Disagreement {
    fn record(&mut self, submission: u64, beyond_ns: u64) {
        self.submissions = self.submissions.saturating_add(1);
        self.worst_ns = self.worst_ns.max(beyond_ns);
        self.first_submission.get_or_insert(submission);
    }

    /// Whether it was seen at all.
    pub fn seen(&self) -> bool {
        self.submissions > 0
    }
}

/// The cross-check of one submission label.
#[derive(Clone, Debug, PartialEq)]
pub struct CrossCheck {
    /// The submission label.
    pub label: String,
    /// Submissions compared (those whose dispatches were all timed).
    pub submissions: u64,
    /// Their total span on the submission clock.
    pub submission_ns: u64,
    /// The sum of their dispatches' times on the dispatch clock.
    pub dispatch_sum_ns: u64,
    /// Where their time went: busy and idle before, between and after
    /// dispatches, summed (adds up to `submission_ns`).
    pub idle: SubmissionIdle,
    /// How many of the submissions were held until the host had enqueued
    /// them, so that their time starts when the device could begin.
    pub device_held: u64,
    /// Host time spent enqueueing the submissions compared.
    pub host_enqueue_ns: u64,
    /// Submissions whose dispatches span longer than they do.
    pub longer_than_span: Disagreement,
    /// Submissions with dispatches overlapping on their serial stream
    /// (never counted where kernels may start early).
    pub overlapping: Disagreement,
    /// Submissions whose dispatches no alignment of the clocks consistent
    /// with the submissions before them places inside.
    pub outside: Disagreement,
    /// The largest shift of the dispatch clock against the submission clock
    /// that placing some submission's dispatches inside it needed (ns,
    /// signed: positive where the dispatch records read early). A constant
    /// shift is the two clocks' calibrations differing, not flagged.
    pub largest_alignment_ns: i128,
    /// Whether any disagreement was seen.
    pub flagged: bool,
}

impl CrossCheck {
    fn new(label: &str) -> CrossCheck {
        CrossCheck {
            label: label.to_string(),
            submissions: 0,
            submission_ns: 0,
            dispatch_sum_ns: 0,
            idle: SubmissionIdle::default(),
            device_held: 0,
            host_enqueue_ns: 0,
            longer_than_span: Disagreement::default(),
            overlapping: Disagreement::default(),
            outside: Disagreement::default(),
            largest_alignment_ns: 0,
            flagged: false,
        }
    }

    /// Idle over span: the share of the submissions' time the device spent
    /// waiting inside them.
    pub fn idle_share(&self) -> f64 {
        self.idle.idle_share()
    }
}

/// The offsets of the dispatch clock that place a submission's dispatches
/// inside it, `[low, high]` (ns added to dispatch times), as the running
/// intersection over consecutive submissions, widened by the drift allowed
/// between them.
#[derive(Clone, Copy, Debug)]
struct Alignment {
    low: i128,
    high: i128,
    at_ns: u64,
}

/// Cross-checks every label that has both submission and dispatch times.
pub fn cross_check(profile: &Profile) -> Vec<CrossCheck> {
    let by_submission = dispatches_by_submission(&profile.dispatches);
    let mut ordered: Vec<&SubmissionRecord> = profile.submissions.iter().collect();
    ordered.sort_by_key(|submission| (submission.start_ns, submission.submission));
    let mut checks: FirstSeen<CrossCheck> = FirstSeen::new();
    // One running alignment per stream: each stream's records come from
    // one pair of clocks.
    let mut alignments: HashMap<u32, Alignment> = HashMap::new();
    for submission in ordered {
        let Some(records) = by_submission.get(&submission.submission) else {
            continue;
        };
        // Computed from the records, never read from the submission: an
        // edited in-memory profile's recorded accounts may be stale.
        let Some(shape) = DispatchShape::of(submission, records) else {
            continue;
        };
        let idle = shape.idle(submission);
        let check = checks.entry(&submission.label, || CrossCheck::new(&submission.label));
        check.submissions = check.submissions.saturating_add(1);
        check.device_held = check
            .device_held
            .saturating_add(u64::from(submission.device_held()));
        check.host_enqueue_ns = check.host_enqueue_ns.saturating_add(submission.host_enqueue_ns());
        check.submission_ns = check.submission_ns.saturating_add(submission.duration_ns());
        check.dispatch_sum_ns = records.iter().fold(check.dispatch_sum_ns, |sum, record| {
            sum.saturating_add(record.duration_ns())
        });
        check.idle = check.idle.saturating_add(idle);

        let resolution = clock_resolution_ns(submission.start_ns);
        let span = submission.duration_ns();
        // Saturating: a forged profile's spans may reach u64::MAX.
        let allowed = span.saturating_add(resolution);
        if shape.extent_ns > allowed {
            check
                .longer_than_span
                .record(submission.submission, shape.extent_ns - allowed);
        }
        if !profile.conditions.early_launch && shape.overlap_ns > resolution {
            check
                .overlapping
                .record(submission.submission, shape.overlap_ns - resolution);
        }
        // The offsets that place this submission's dispatches inside it,
        // within the clocks' resolution.
        let low = i128::from(submission.start_ns) - i128::from(shape.first_start_ns) - i128::from(resolution);
        let high = i128::from(submission.end_ns) - i128::from(shape.last_end_ns) + i128::from(resolution);
        if low > high {
            // Longer than its span: already counted, and no offset fits.
            alignments.remove(&submission.stream);
            continue;
        }
        let needed = 0i128.clamp(low, high);
        if needed.abs() > check.largest_alignment_ns.abs() {
            check.largest_alignment_ns = needed;
        }
        let running = match alignments.get(&submission.stream) {
            Some(previous) => {
                let drift =
                    (submission.start_ns.saturating_sub(previous.at_ns) as f64 * CLOCK_DRIFT_RATE) as i128;
                let (low_before, high_before) = (previous.low - drift, previous.high + drift);
                if low > high_before || high < low_before {
                    let beyond = if low > high_before {
                        low - high_before
                    } else {
                        low_before - high
                    };
                    check
                        .outside
                        .record(submission.submission, u64::try_from(beyond).unwrap_or(u64::MAX));
                    Alignment {
                        low,
                        high,
                        at_ns: submission.start_ns,
                    }
                } else {
                    Alignment {
                        low: low.max(low_before),
                        high: high.min(high_before),
                        at_ns: submission.start_ns,
                    }
                }
            }
            None => Alignment {
                low,
                high,
                at_ns: submission.start_ns,
            },
        };
        alignments.insert(submission.stream, running);
    }
    let mut checks: Vec<CrossCheck> = checks.into_groups().into_iter().map(|(_, check)| check).collect();
    for check in &mut checks {
        check.flagged = check.longer_than_span.seen() || check.overlapping.seen() || check.outside.seen();
    }
    checks
}
