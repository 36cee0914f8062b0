//! The profiler session: one per device, configured once at creation. It
//! owns the counters and the timing tables; backends feed it, reports read a
//! [`Profile`] snapshot of it. Nothing here is a process global, so two
//! devices (or two tests) never see each other's numbers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use super::aggregate::group_in_order;
use super::{
    Conditions, CounterSnapshot, Counters, DispatchRecord, DispatchTiming, Phase, Profile, ProfileLevel,
    SubmissionRecord, SubmissionStats, TokenRecord, TokenSelection,
};

#[derive(Debug)]
struct OpenToken {
    index: u32,
    phase: Phase,
    start_ns: u64,
    counters_at_start: CounterSnapshot,
}

#[derive(Debug, Default)]
struct Tables {
    submissions: Vec<SubmissionRecord>,
    dispatches: Vec<DispatchRecord>,
    tokens: Vec<TokenRecord>,
    open_token: Option<OpenToken>,
    next_token: u32,
    warnings: Vec<String>,
    warned_keys: Vec<String>,
}

/// A device's profiling session.
///
/// Its public side reads: counters, tables, tokens, warnings, snapshots and
/// reset (and marks tokens, which is how a model says what a dispatch was
/// for). Its recording side (what backends call as work runs) is private to
/// the crate, so nothing outside a backend can forge a record.
#[derive(Debug)]
pub struct Profiler {
    level: ProfileLevel,
    /// The tokens timed; the others count only.
    selection: TokenSelection,
    /// Whether the work committed now is timed: the open token is selected
    /// (or none is open and every token is). Set as tokens begin and end,
    /// so the hot path reads one flag.
    timing_now: AtomicBool,
    dispatch_timing: DispatchTiming,
    counters: Counters,
    epoch: Instant,
    next_submission: AtomicU64,
    tables: Mutex<Tables>,
    late_records: OnceLock<LateRecords>,
}

/// How a backend delivers records that arrive after the host wait.
struct LateRecords(Box<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for LateRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LateRecords")
    }
}

impl Profiler {
    /// A session recording at `level`, on a backend whose dispatch timing
    /// capability is `dispatch_timing`. When dispatch timing is asked for
    /// but the backend cannot provide it, says so here, once, on stderr and
    /// in the warnings: only per-submission timing will be recorded, and
    /// the report says "unsupported" rather than showing zeros.
    pub(crate) fn new(
        level: ProfileLevel,
        selection: TokenSelection,
        dispatch_timing: DispatchTiming,
    ) -> Self {
        let profiler = Profiler {
            level,
            selection,
            timing_now: AtomicBool::new(selection.times_outside_tokens()),
            counters: Counters::default(),
            epoch: Instant::now(),
            next_submission: AtomicU64::new(0),
            tables: Mutex::new(Tables::default()),
            late_records: OnceLock::new(),
            dispatch_timing,
        };
        if level.times_dispatches() && !profiler.dispatch_timing.is_supported() {
            profiler.warn_once(
                "dispatch-timing-unsupported",
                &format!(
                    "kernelscope: per-dispatch timing is {}; only per-submission timing will be recorded",
                    profiler.dispatch_timing.describe()
                ),
            );
        }
        profiler
    }

    /// Registers how the backend delivers records still outstanding: one
    /// whose dispatch times arrive in batches some time after the host wait
    /// (CUPTI, flushed lazily because a forced flush per token slows the
    /// next launch) holds those submissions back until their times come.
    /// Every reader of records calls it first, so nothing is read half-made.
    /// Only the first registration counts.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn set_late_records(&self, deliver: Box<dyn Fn() + Send + Sync>) {
        let _ = self.late_records.set(LateRecords(deliver));
    }

    /// Delivers every outstanding record (see [`set_late_records`](Self::set_late_records)).
    fn deliver_late_records(&self) {
        if let Some(LateRecords(deliver)) = self.late_records.get() {
            deliver();
        }
    }

    /// The level chosen at creation.
    pub fn level(&self) -> ProfileLevel {
        self.level
    }

    /// The tokens timed (`--profile-tokens`); the others are counted only.
    pub fn token_selection(&self) -> TokenSelection {
        self.selection
    }

    /// Whether and how the backend times dispatches.
    pub fn dispatch_timing(&self) -> &DispatchTiming {
        &self.dispatch_timing
    }

    /// The live counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Host time in ns since this session began; the clock every record uses.
    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The instant all `*_ns` timestamps count from.
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// Whether submissions are being timed.
    #[inline]
    pub fn times_submissions(&self) -> bool {
        self.level.times_submissions() && self.timing_now.load(Ordering::Relaxed)
    }

    /// Whether dispatches are being timed: asked for, and the backend can.
    #[inline]
    pub fn times_dispatches(&self) -> bool {
        self.level.times_dispatches()
            && self.dispatch_timing.is_supported()
            && self.timing_now.load(Ordering::Relaxed)
    }

    /// Prints `message` on stderr and adds it to the warnings, once per `key`.
    pub fn warn_once(&self, key: &str, message: &str) {
        let mut tables = self.lock();
        if tables.warned_keys.iter().any(|known| known == key) {
            return;
        }
        tables.warned_keys.push(key.to_string());
        eprintln!("{message}");
        tables.warnings.push(message.to_string());
    }

    /// The token open now, if any (backends that resolve times after the
    /// commit remember it with the submission).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn current_token(&self) -> Option<u32> {
        self.lock().open_token.as_ref().map(|open| open.index)
    }

    /// Takes the next submission sequence number.
    pub(crate) fn next_submission_id(&self) -> u64 {
        self.next_submission.fetch_add(1, Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        crate::sync::lock(&self.tables)
    }

    /// Records a timed submission and the timed dispatches it carried
    /// (`dispatches` may be empty when only submissions are timed). The
    /// records are tagged with the open token, if any.
    pub(crate) fn record_submission(
        &self,
        mut submission: SubmissionRecord,
        mut dispatches: Vec<DispatchRecord>,
    ) {
        let mut tables = self.lock();
        // A backend that resolves times later passes the token that was open
        // when the work was committed; otherwise it is the one open now.
        let token = submission
            .token
            .or_else(|| tables.open_token.as_ref().map(|open| open.index));
        submission.token = token;
        for dispatch in &mut dispatches {
            dispatch.token = token;
        }
        tables.submissions.push(submission);
        tables.dispatches.append(&mut dispatches);
    }

    /// Marks the start of a token; counters and records until
    /// [`end_token`](Self::end_token) are attributed to it. An open token is
    /// closed first.
    pub fn begin_token(&self, phase: Phase) {
        let now = self.now_ns();
        let counters_at_start = self.counters.snapshot();
        let mut tables = self.lock();
        self.close_token(&mut tables, now, counters_at_start);
        let index = tables.next_token;
        tables.next_token += 1;
        self.timing_now
            .store(self.selection.contains(index), Ordering::Relaxed);
        tables.open_token = Some(OpenToken {
            index,
            phase,
            start_ns: now,
            counters_at_start,
        });
    }

    /// Marks the end of the open token (no-op when none is open).
    pub fn end_token(&self) {
        let now = self.now_ns();
        let counters = self.counters.snapshot();
        let mut tables = self.lock();
        self.close_token(&mut tables, now, counters);
        self.timing_now
            .store(self.selection.times_outside_tokens(), Ordering::Relaxed);
    }

    fn close_token(&self, tables: &mut Tables, now: u64, counters: CounterSnapshot) {
        if let Some(open) = tables.open_token.take() {
            tables.tokens.push(TokenRecord {
                index: open.index,
                phase: open.phase,
                start_ns: open.start_ns,
                end_ns: now,
                counters: counters - open.counters_at_start,
                timed: self.selection.contains(open.index),
            });
        }
    }

    /// The per-label submission table, sorted by total time, longest first
    /// (ties by label, so the order is stable).
    pub fn submission_table(&self) -> Vec<SubmissionStats> {
        self.deliver_late_records();
        submission_table(&self.lock().submissions)
    }

    /// Per-dispatch records grouped by submission label: labels in the order
    /// they first arrived, records in insertion order within each label.
    pub fn dispatches_by_label(&self) -> Vec<(String, Vec<DispatchRecord>)> {
        self.deliver_late_records();
        dispatches_by_label(&self.lock().dispatches)
    }

    /// Copies of the recorded submissions.
    pub fn submissions(&self) -> Vec<SubmissionRecord> {
        self.deliver_late_records();
        self.lock().submissions.clone()
    }

    /// Copies of the recorded dispatches.
    pub fn dispatches(&self) -> Vec<DispatchRecord> {
        self.deliver_late_records();
        self.lock().dispatches.clone()
    }

    /// Copies of the recorded tokens.
    pub fn tokens(&self) -> Vec<TokenRecord> {
        self.deliver_late_records();
        self.lock().tokens.clone()
    }

    /// Warnings raised so far (each printed once on stderr when raised).
    /// Late records are delivered first: matching them can raise one.
    pub fn warnings(&self) -> Vec<String> {
        self.deliver_late_records();
        self.lock().warnings.clone()
    }

    /// Clears every table and counter (the level and capability stay).
    pub fn reset(&self) {
        // Records of work done before the reset must not land after it.
        self.deliver_late_records();
        let mut tables = self.lock();
        let warnings = std::mem::take(&mut tables.warnings);
        *tables = Tables {
            warnings,
            ..Tables::default()
        };
        self.counters.reset();
        self.timing_now
            .store(self.selection.times_outside_tokens(), Ordering::Relaxed);
    }

    /// A plain-data snapshot of everything recorded, under `conditions`.
    pub fn snapshot(&self, conditions: Conditions) -> Profile {
        self.deliver_late_records();
        let tables = self.lock();
        Profile {
            schema: super::PROFILE_SCHEMA_VERSION,
            tool: format!("kernelscope {}", env!("CARGO_PKG_VERSION")),
            conditions,
            counters: self.counters.snapshot(),
            tokens: tables.tokens.clone(),
            submissions: tables.submissions.clone(),
            dispatches: tables.dispatches.clone(),
            warnings: tables.warnings.clone(),
            ranks: Vec::new(),
            experts: None,
        }
        .with_idle()
    }
}

/// The per-label table of `submissions`, longest total first.
pub fn submission_table(submissions: &[SubmissionRecord]) -> Vec<SubmissionStats> {
    let by_label = group_in_order(
        submissions,
        |record| &record.label,
        |record| (record.duration_ns(), record.host_enqueue_ns()),
    );
    let mut table: Vec<SubmissionStats> = by_label
        .into_iter()
        .map(|(label, rows)| {
            let mut durations: Vec<u64> = rows.iter().map(|row| row.0).collect();
            let mut stats = SubmissionStats::from_durations(&label, &mut durations);
            // Saturating: see `SubmissionStats::from_durations`.
            stats.host_enqueue_ns = rows.iter().fold(0u64, |total, row| total.saturating_add(row.1));
            stats
        })
        .collect();
    table.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.label.cmp(&b.label)));
    table
}

/// `dispatches` grouped by label in first-arrival order.
pub(crate) fn dispatches_by_label(dispatches: &[DispatchRecord]) -> Vec<(String, Vec<DispatchRecord>)> {
    group_in_order(dispatches, |record| &record.label, |record| (*record).clone())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::profile::TimingMechanism;

    #[test]
    fn late_records_are_delivered_before_any_read_and_before_a_reset() {
        let profiler = Arc::new(Profiler::new(
            ProfileLevel::Dispatch,
            TokenSelection::ALL,
            DispatchTiming::supported(TimingMechanism::HostClock),
        ));
        let calls = Arc::new(AtomicU32::new(0));
        let weak = Arc::downgrade(&profiler);
        let counted = calls.clone();
        // Like a backend whose times arrive late: each delivery records the
        // one submission it was holding.
        profiler.set_late_records(Box::new(move || {
            let Some(profiler) = weak.upgrade() else { return };
            let call = counted.fetch_add(1, Ordering::SeqCst);
            profiler.record_submission(
                SubmissionRecord {
                    label: Arc::from("late"),
                    submission: u64::from(call),
                    stream: 0,
                    token: None,
                    start_ns: 10,
                    end_ns: 20 + u64::from(call),
                    dispatches: 0,
                    enqueue: None,
                    idle: None,
                },
                Vec::new(),
            );
        }));
        assert_eq!(profiler.submissions().len(), 1, "delivered before the read");
        assert_eq!(profiler.submission_table()[0].count, 2);
        profiler.reset();
        assert_eq!(calls.load(Ordering::SeqCst), 3, "reset delivers first");
        assert_eq!(
            profiler.submissions().len(),
            1,
            "what was delivered before the reset is gone; only the new delivery remains"
        );
        // Every reader delivers: tokens and warnings too.
        let before = calls.load(Ordering::SeqCst);
        profiler.tokens();
        profiler.warnings();
        assert_eq!(calls.load(Ordering::SeqCst), before + 2);
    }

    #[test]
    fn asking_whether_dispatches_are_timed_changes_nothing() {
        let profiler = Profiler::new(
            ProfileLevel::Dispatch,
            TokenSelection::ALL,
            DispatchTiming::Unsupported {
                reason: "a test".into(),
            },
        );
        assert_eq!(profiler.warnings().len(), 1, "said once, at creation");
        for _ in 0..3 {
            assert!(!profiler.times_dispatches());
        }
        assert_eq!(profiler.warnings().len(), 1);
    }
}
