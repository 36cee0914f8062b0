//! What a report's tables and charts summarise: the dispatches of a
//! profile's repetition tokens (decode, or every token; the whole run where
//! none were marked), their total time and the roofline they are placed on.
//! Made once per report, and once per run of a comparison, and read by the
//! text and the HTML renderings alike.

use std::collections::HashSet;

use kernelscope::profile::{Aggregate, DispatchRecord, Profile, Roofline, aggregate};

/// The dispatches a summary's tables group, and what each row is measured
/// against.
pub(crate) struct Summary<'a> {
    /// The dispatches of the repetition tokens, or of the whole run.
    pub records: Vec<&'a DispatchRecord>,
    /// Their device time, summed (saturating).
    pub total_ns: u64,
    /// The device's ceilings, from the profile's conditions.
    pub roofline: Roofline,
    /// `the whole run` or `31 tokens`.
    pub over: String,
}

impl<'a> Summary<'a> {
    /// The summary of `profile`'s repetition tokens (decode, or every token).
    pub fn of(profile: &'a Profile) -> Self {
        // A set: a long token list must not cost a scan per dispatch.
        let repetition_tokens: HashSet<u32> = profile.repetition_tokens().into_iter().collect();
        let records: Vec<_> = if repetition_tokens.is_empty() {
            profile.dispatches.iter().collect()
        } else {
            profile
                .dispatches
                .iter()
                .filter(|record| {
                    record
                        .token
                        .is_some_and(|token| repetition_tokens.contains(&token))
                })
                .collect()
        };
        let over = if repetition_tokens.is_empty() {
            "the whole run".to_string()
        } else {
            format!("{} tokens", repetition_tokens.len())
        };
        let total_ns = saturating_sum(records.iter().map(|record| record.duration_ns()));
        Summary {
            records,
            total_ns,
            roofline: Roofline::of(&profile.conditions),
            over,
        }
    }

    /// The groups of the records by `key`, in first-appearance order.
    pub fn groups(&self, key: impl Fn(&DispatchRecord) -> String) -> Vec<Aggregate> {
        aggregate(self.records.iter().copied(), key)
    }

    /// The groups of the records by `key`, heaviest first.
    pub fn heaviest_groups(&self, key: impl Fn(&DispatchRecord) -> String) -> Vec<Aggregate> {
        by_total(self.groups(key))
    }
}

/// The sum of `values`, held at `u64::MAX` rather than wrapping: a loaded
/// profile's sums were checked to fit, but one forged in memory was not.
pub(crate) fn saturating_sum(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, u64::saturating_add)
}

/// `rows` heaviest first, ties by key so the order never depends on the
/// order the records came in.
pub(crate) fn by_total(mut rows: Vec<Aggregate>) -> Vec<Aggregate> {
    rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.key.cmp(&b.key)));
    rows
}

/// A record's op kind, as its rows are keyed.
pub(crate) fn op_of(record: &DispatchRecord) -> String {
    record.op_kind.to_string()
}

/// The mark after a row of time measured inside a kernel.
pub(crate) const IN_KERNEL_MARK: &str = "†";

/// A record's kernel, as its rows are keyed: a phase timed inside a
/// kernel as `kernel · phase †`, so a launch's phases are rows apart.
pub(crate) fn kernel_of(record: &DispatchRecord) -> String {
    match record.in_kernel {
        Some(_) => format!("{} {IN_KERNEL_MARK}", record.kernel_and_phase()),
        None => record.kernel.to_string(),
    }
}
