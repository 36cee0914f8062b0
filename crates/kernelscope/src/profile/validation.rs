//! Whether a loaded profile holds together: peaks positive and finite,
//! every record's interval ordered, ids unique, each dispatch inside a
//! submission that agrees with it, and every sum a report makes within
//! u64. A file that fails is refused naming the record (`dispatches[12]`).

use std::collections::HashMap;

use super::data::{Profile, quoted};
use super::{CounterSnapshot, SubmissionRecord};

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
    /// one record per slot, times, bytes and flops that sum within u64.
    fn check_dispatches(&self, submissions: &HashMap<u64, (usize, &SubmissionRecord)>) -> Checked {
        let mut dispatch_slots: HashMap<(u64, u32), usize> = HashMap::new();
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
            if let Some(first) = dispatch_slots.insert((dispatch.submission, dispatch.index), position) {
                return Err(format!(
                    "{record}: dispatch {} of submission {} is also dispatches[{first}]",
                    dispatch.index, dispatch.submission
                ));
            }
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
