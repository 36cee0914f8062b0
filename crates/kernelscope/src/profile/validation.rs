//! Whether a loaded profile holds together: peaks positive and finite,
//! every record's interval ordered, ids unique, each dispatch inside a
//! submission that agrees with it, and every sum a report makes within
//! u64. A file that fails is refused naming the record (`dispatches[12]`).
//! The phases of a kernel timed inside it share its slot: one record per
//! phase, each phase once, all of the launch saying how many it had.

use std::collections::{HashMap, HashSet};

use super::data::{Profile, quoted};
use super::{CounterSnapshot, DispatchRecord, SubmissionRecord};

/// A problem, naming the record.
type Checked<T = ()> = std::result::Result<T, String>;

/// `end - start`, or the problem of an interval that ends before it starts.
fn span(record: &str, start: u64, end: u64) -> Checked<u64> {
    end.checked_sub(start)
        .ok_or_else(|| format!("{record}: end_ns {end} is before start_ns {start}"))
}

/// `total + value`, or the problem of a sum past 2^64.
fn add(total: u64, value: u64, record: &str, what: &str) -> Checked<u64> {
    total
        .checked_add(value)
        .ok_or_else(|| format!("{record}: the {what} add up past 2^64"))
}

impl Profile {
    /// Whether the profile holds together; the problem, naming the record
    /// (`dispatches[12]`), when it does not.
    pub(super) fn check(&self) -> Checked {
        self.check_peaks()?;
        if let Some(experts) = &self.experts {
            experts.check()?;
        }
        self.check_tokens()?;
        let submissions = self.check_submissions()?;
        self.check_dispatches(&submissions)
    }

    /// The ceilings, where known, are positive and finite.
    fn check_peaks(&self) -> Checked {
        self.conditions.ceilings.check()
    }

    /// Tokens: ordered intervals, unique indices, times and counters that
    /// sum within u64.
    fn check_tokens(&self) -> Checked {
        let mut token_positions: HashMap<u32, usize> = HashMap::new();
        let (mut token_time, mut token_counters) = (0u64, CounterSnapshot::default());
        for (position, token) in self.tokens.iter().enumerate() {
            let record = format!("tokens[{position}]");
            let duration = span(&record, token.start_ns, token.end_ns)?;
            if let Some(first) = token_positions.insert(token.index, position) {
                return Err(format!(
                    "{record}: token index {} is also the index of tokens[{first}]",
                    token.index
                ));
            }
            token_time = add(token_time, duration, &record, "token times")?;
            token_counters = token_counters
                .checked_add(token.counters)
                .ok_or_else(|| format!("{record}: the token counters add up past 2^64"))?;
        }
        Ok(())
    }

    /// Submissions: ordered intervals, unique numbers, times that sum
    /// within u64. Returns each by its number, with its position.
    fn check_submissions(&self) -> Checked<HashMap<u64, (usize, &SubmissionRecord)>> {
        let mut submissions: HashMap<u64, (usize, &SubmissionRecord)> = HashMap::new();
        let (mut submission_time, mut enqueue_time) = (0u64, 0u64);
        for (position, submission) in self.submissions.iter().enumerate() {
            let record = format!("submissions[{position}]");
            let duration = span(&record, submission.start_ns, submission.end_ns)?;
            if let Some((first, _)) = submissions.insert(submission.submission, (position, submission)) {
                return Err(format!(
                    "{record}: submission {} is also the number of submissions[{first}]",
                    submission.submission
                ));
            }
            submission_time = add(submission_time, duration, &record, "submission times")?;
            enqueue_time = add(
                enqueue_time,
                submission.host_enqueue_ns(),
                &record,
                "host enqueue times",
            )?;
        }
        Ok(submissions)
    }

    /// Dispatches: ordered intervals, each in a submission of the profile
    /// that agrees with it (index within its count, same label and token),
    /// one record per slot (or one per phase of a launch timed inside the
    /// kernel, see [`Slots::take`]), times, bytes and flops that sum within u64.
    fn check_dispatches(&self, submissions: &HashMap<u64, (usize, &SubmissionRecord)>) -> Checked {
        let mut slots = Slots::default();
        let (mut dispatch_time, mut bytes, mut flops) = (0u64, 0u64, 0u64);
        for (position, dispatch) in self.dispatches.iter().enumerate() {
            let record = format!("dispatches[{position}]");
            let duration = span(&record, dispatch.start_ns, dispatch.end_ns)?;
            // Dispatches are recorded with the submission that ran them: one
            // without its submission, or disagreeing with it, was not written
            // by a profiler.
            let Some(&(owner, submission)) = submissions.get(&dispatch.submission) else {
                return Err(format!(
                    "{record}: submission {} is not among the profile's submissions",
                    dispatch.submission
                ));
            };
            if dispatch.index >= submission.dispatches {
                return Err(format!(
                    "{record}: index {} is past the {} dispatches of submissions[{owner}]",
                    dispatch.index, submission.dispatches
                ));
            }
            slots.take(dispatch, position, &record)?;
            if dispatch.label != submission.label {
                return Err(format!(
                    "{record}: label {} differs from {} of submissions[{owner}]",
                    quoted(&dispatch.label),
                    quoted(&submission.label)
                ));
            }
            if dispatch.token != submission.token {
                return Err(format!(
                    "{record}: token {:?} differs from token {:?} of submissions[{owner}]",
                    dispatch.token, submission.token
                ));
            }
            dispatch_time = add(dispatch_time, duration, &record, "dispatch times")?;
            if dispatch.bytes_written > dispatch.bytes {
                return Err(format!(
                    "{record}: bytes_written {} is more than the {} bytes it moves",
                    dispatch.bytes_written, dispatch.bytes
                ));
            }
            bytes = add(bytes, dispatch.bytes, &record, "dispatch bytes")?;
            flops = add(flops, dispatch.flops, &record, "dispatch flops")?;
        }
        Ok(())
    }
}

/// The dispatch slots (submission, index) of a profile's records so far.
#[derive(Default)]
struct Slots {
    /// Each slot's first record, and for a launch timed inside the kernel
    /// the number of phases it had.
    holders: HashMap<(u64, u32), (usize, Option<u32>)>,
    /// The phases seen, by slot and phase index (a set, never a list as
    /// long as a record says: a file's phase count is not to be trusted).
    phases: HashSet<(u64, u32, u32)>,
}

impl Slots {
    /// Takes `dispatch`'s slot for `position` (`record` names it): a slot
    /// holds one record, or the phases of one launch, each once.
    fn take(&mut self, dispatch: &DispatchRecord, position: usize, record: &str) -> Checked {
        let phase = match &dispatch.in_kernel {
            Some(phase) if phase.index >= phase.phases => {
                return Err(format!(
                    "{record}: phase {} is past the {} phases of its launch",
                    phase.index, phase.phases
                ));
            }
            Some(phase) => Some((phase.index, phase.phases)),
            None => None,
        };
        let slot = (dispatch.submission, dispatch.index);
        let held = *self
            .holders
            .entry(slot)
            .or_insert((position, phase.map(|(_, phases)| phases)));
        match (held, phase) {
            (_, None) if held.0 == position => Ok(()),
            (_, Some((index, _))) if held.0 == position => {
                self.phases.insert((slot.0, slot.1, index));
                Ok(())
            }
            ((first, Some(phases)), Some((_, count))) if phases != count => Err(format!(
                "{record}: a phase of a launch of {count} phases, but dispatches[{first}] of its slot has {phases}"
            )),
            ((_, Some(_)), Some((index, _))) if self.phases.insert((slot.0, slot.1, index)) => Ok(()),
            ((first, _), _) => Err(format!(
                "{record}: dispatch {} of submission {} is also dispatches[{first}]",
                dispatch.index, dispatch.submission
            )),
        }
    }
}
