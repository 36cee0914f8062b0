//! Device idle time as a measurement: inside each submission, when the
//! device was running one of its dispatches (busy: the union of their
//! intervals) and when it was not, split into before the first dispatch,
//! between dispatches and after the last; and for each dispatch, the gap
//! the device sat idle before it started (who waited on a launch). On a
//! small model this idle time is a real share of the token, so it is
//! reported like any other cost rather than offered as an excuse.

use std::collections::HashMap;

use super::records::SubmissionIdle;
use super::{DispatchRecord, Profile, SubmissionRecord};

/// The idle accounting of `submission` from `dispatches`, its dispatch
/// records in any order; `None` unless every dispatch it carried was timed
/// (a submission with records missing says nothing about idle time).
///
/// Busy time and the gaps between dispatches are read on the dispatch
/// clock alone, so they do not depend on how that clock was aligned with
/// the submission's. The rest of the span (its edges) is split into before
/// and after by that alignment, clamped so neither is negative: where the
/// two clocks' calibrations differ by a few microseconds, the split moves,
/// never the totals. Where the dispatches span longer than the submission
/// (the clocks disagree; the cross-check flags it), the busy time is cut to
/// the span, so the parts always add up to it.
pub fn submission_idle(
    submission: &SubmissionRecord,
    dispatches: &[&DispatchRecord],
) -> Option<SubmissionIdle> {
    Some(DispatchShape::of(submission, dispatches)?.idle(submission))
}

/// What a submission's dispatch records say on their own clock: the union
/// of their intervals, the gaps between them, their extent (first start to
/// last end), the largest overlap of one with those before it, and where the
/// first starts relative to the submission's start (negative where the
/// dispatch clock places it earlier).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DispatchShape {
    pub busy_ns: u64,
    pub between_ns: u64,
    pub extent_ns: u64,
    pub overlap_ns: u64,
    pub lead_ns: i128,
    pub first_start_ns: u64,
    pub last_end_ns: u64,
}

impl DispatchShape {
    /// The idle accounting of `submission`, whose dispatches have this
    /// shape (see [`submission_idle`]).
    pub(crate) fn idle(&self, submission: &SubmissionRecord) -> SubmissionIdle {
        let span = submission.duration_ns();
        let between = self.between_ns.min(span);
        let busy = self.busy_ns.min(span - between);
        let edges = span - between - busy;
        let before = self.lead_ns.clamp(0, edges as i128) as u64;
        SubmissionIdle {
            busy_ns: busy,
            before_ns: before,
            between_ns: between,
            after_ns: edges - before,
        }
    }

    /// The shape of `submission`'s `dispatches`; `None` unless all of its
    /// dispatches were timed.
    pub(crate) fn of(submission: &SubmissionRecord, dispatches: &[&DispatchRecord]) -> Option<DispatchShape> {
        // A kernel timed inside has a record per phase, all one dispatch.
        let launches = dispatches.iter().filter(|dispatch| dispatch.is_launch()).count();
        if dispatches.is_empty() || launches != submission.dispatches as usize {
            return None;
        }
        let mut intervals: Vec<(u64, u64)> = dispatches
            .iter()
            .map(|dispatch| (dispatch.start_ns, dispatch.end_ns.max(dispatch.start_ns)))
            .collect();
        intervals.sort_unstable();
        let first_start = intervals[0].0;
        let (mut busy, mut between, mut overlap) = (0u64, 0u64, 0u64);
        let mut covered_to = first_start;
        for &(from, to) in &intervals {
            // Saturating: a forged profile's intervals may sum past u64.
            if from > covered_to {
                between = between.saturating_add(from - covered_to);
                covered_to = from;
            } else {
                overlap = overlap.max(covered_to.min(to) - from);
            }
            if to > covered_to {
                busy = busy.saturating_add(to - covered_to);
                covered_to = to;
            }
        }
        Some(DispatchShape {
            busy_ns: busy,
            between_ns: between,
            extent_ns: covered_to - first_start,
            overlap_ns: overlap,
            lead_ns: i128::from(first_start) - i128::from(submission.start_ns),
            first_start_ns: first_start,
            last_end_ns: covered_to,
        })
    }
}

/// `profile`'s dispatch records by submission number, each list in the
/// order the records came.
pub(crate) fn dispatches_by_submission(dispatches: &[DispatchRecord]) -> HashMap<u64, Vec<&DispatchRecord>> {
    let mut by_submission: HashMap<u64, Vec<&DispatchRecord>> = HashMap::new();
    for dispatch in dispatches {
        by_submission
            .entry(dispatch.submission)
            .or_default()
            .push(dispatch);
    }
    by_submission
}

impl Profile {
    /// Fills every submission's [`SubmissionRecord::idle`] from its
    /// dispatch records (rank 0's and every other rank's); a submission
    /// whose dispatches were not all timed keeps none.
    pub fn with_idle(mut self) -> Profile {
        fill_idle(&mut self.submissions, &self.dispatches);
        for rank in &mut self.ranks {
            fill_idle(&mut rank.submissions, &rank.dispatches);
        }
        self
    }
}

fn fill_idle(submissions: &mut [SubmissionRecord], dispatches: &[DispatchRecord]) {
    let by_submission = dispatches_by_submission(dispatches);
    for submission in submissions {
        submission.idle = by_submission
            .get(&submission.submission)
            .and_then(|records| submission_idle(submission, records));
    }
}

/// The idle gap before each dispatch, by `(submission, index)`: for the
/// first, the submission's idle time before it (see [`submission_idle`]);
/// for the others, from the latest end among the dispatches that started
/// before it to its own start (0 where it started while another was still
/// running). A submission's gaps add up to its idle time before and between
/// its dispatches; the phases of a kernel timed inside it, which share its
/// index, add theirs to one gap (the phases after the first tile the launch,
/// so none of them waited). Submissions whose dispatches were not all timed
/// have none.
pub fn idle_gaps(
    dispatches: &[DispatchRecord],
    submissions: &[SubmissionRecord],
) -> HashMap<(u64, u32), u64> {
    let by_number: HashMap<u64, &SubmissionRecord> = submissions
        .iter()
        .map(|submission| (submission.submission, submission))
        .collect();
    let mut gaps = HashMap::new();
    for (number, mut records) in dispatches_by_submission(dispatches) {
        let Some(idle) = by_number
            .get(&number)
            .and_then(|submission| submission_idle(submission, &records))
        else {
            continue;
        };
        let phase = |record: &DispatchRecord| record.in_kernel.as_ref().map_or(0, |phase| phase.index);
        records.sort_by_key(|record| (record.start_ns, record.index, phase(record)));
        let mut covered_to = records[0].start_ns;
        for (position, record) in records.into_iter().enumerate() {
            let gap = if position == 0 {
                idle.before_ns
            } else {
                record.start_ns.saturating_sub(covered_to)
            };
            let total: &mut u64 = gaps.entry((number, record.index)).or_insert(0);
            *total = total.saturating_add(gap);
            covered_to = covered_to.max(record.end_ns);
        }
    }
    gaps
}

/// For each key of `records` (in first-appearance order), its calls and
/// the idle time (ns) the device spent waiting before them, from `gaps`.
/// A launch timed inside the kernel waited before its first phase: that
/// phase's record carries the launch's call and gap, the others none.
pub fn idle_before_by<'a>(
    records: impl IntoIterator<Item = &'a DispatchRecord>,
    gaps: &HashMap<(u64, u32), u64>,
    key: impl Fn(&DispatchRecord) -> String,
) -> Vec<(String, u64, u64)> {
    let mut groups = super::aggregate::FirstSeen::new();
    for record in records.into_iter().filter(|record| record.is_launch()) {
        let gap = gaps.get(&(record.submission, record.index)).copied().unwrap_or(0);
        let (calls, total): &mut (u64, u64) = groups.entry(&key(record), || (0, 0));
        *calls += 1;
        *total = total.saturating_add(gap);
    }
    groups
        .into_groups()
        .into_iter()
        .map(|(key, (calls, idle))| (key, calls, idle))
        .collect()
}
