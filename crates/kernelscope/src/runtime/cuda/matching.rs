//! Handing finished submissions to the profiler, in submission order, once
//! their dispatches have times: those timed by event pairs have them
//! already; those timed by CUPTI wait here until CUPTI hands over their
//! kernels' records, which come in stream order, one per kernel. A library
//! call (cuBLASLt) expects as many records as its plan counted kernels,
//! whatever their names; each becomes a dispatch record under its name.
//! A kernel launched early (programmatic dependent launch) starts while its
//! predecessor runs and waits for it inside: it is timed from the
//! predecessor's end, so the wait counts once, in the kernel waited for,
//! and the times of one stream never overlap.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::clock::CuptiClock;
use super::cupti::KernelActivity;
use crate::profile::{DispatchMeta, Profiler, SubmissionRecord};

/// A dispatch whose times are known (`times`) or await its CUPTI record.
pub(crate) struct ResolvedDispatch {
    pub(super) index: u32,
    pub(super) meta: DispatchMeta,
    pub(super) times: Option<(u64, u64)>,
    /// A library kernel: its record's name is taken, not checked.
    pub(super) library: bool,
}

/// A submission whose own times are known; its dispatches may still wait.
pub(crate) struct ResolvedSubmission {
    pub(super) record: SubmissionRecord,
    pub(super) dispatches: Vec<ResolvedDispatch>,
}

/// Submissions waiting, in order, for CUPTI records, and the records taken
/// but not yet matched.
#[derive(Default)]
struct Awaiting {
    submissions: VecDeque<ResolvedSubmission>,
    kernels: VecDeque<KernelActivity>,
    /// The end of the last kernel matched (CUPTI's clock).
    previous_end: u64,
}

/// A kernel's (start, end) on the stream, started no earlier than the
/// previous kernel's end: an early-launched kernel's wait for its
/// predecessor is the predecessor's time.
fn after_previous(start: u64, end: u64, previous_end: &mut u64) -> (u64, u64) {
    let start = start.max(*previous_end).min(end);
    *previous_end = (*previous_end).max(end);
    (start, end)
}

/// The queue of resolved submissions and, when CUPTI times dispatches, its
/// clock and whether its records still line up with the dispatches.
pub(crate) struct CuptiMatcher {
    clock: Option<CuptiClock>,
    /// False once CUPTI's records failed to line up with the dispatches.
    lined_up: AtomicBool,
    awaiting: Mutex<Awaiting>,
}

impl CuptiMatcher {
    pub(crate) fn new(clock: Option<CuptiClock>) -> CuptiMatcher {
        CuptiMatcher {
            clock,
            lined_up: AtomicBool::new(true),
            awaiting: Mutex::new(Awaiting::default()),
        }
    }

    /// Whether dispatches are timed by CUPTI.
    pub(crate) fn uses_cupti(&self) -> bool {
        self.clock.is_some()
    }

    /// Queues submissions resolved from their event pairs, oldest first.
    pub(crate) fn enqueue(&self, resolved: Vec<ResolvedSubmission>) {
        crate::sync::lock(&self.awaiting).submissions.extend(resolved);
    }

    /// Hands the profiler every waiting submission whose CUPTI records have
    /// come, in submission order. CUPTI hands records over a buffer at a
    /// time; forcing a flush at every host wait costs the flush and slows
    /// the next graph launch (measured on an H100: 526 -> 367 µs of host
    /// time per profiled graph launch, 380 -> 414 tok/s on llama-3.2-1b),
    /// so the wait only takes what is ready and `force` (readers of the
    /// profile, through `Profiler::deliver_late_records`) takes the rest.
    pub(crate) fn deliver(&self, profiler: &Profiler, force: bool) {
        let mut awaiting = crate::sync::lock(&self.awaiting);
        let Awaiting {
            submissions,
            kernels,
            previous_end,
        } = &mut *awaiting;
        let mut taken = false;
        while let Some(front) = submissions.front() {
            let needed = front.dispatches.iter().filter(|d| d.times.is_none()).count();
            if needed > kernels.len() {
                match &self.clock {
                    Some(clock) if !taken => {
                        kernels.extend(super::cupti::take(clock.key(), force));
                        taken = true;
                        continue;
                    }
                    _ if !force => break,
                    _ => {}
                }
            }
            let submission = submissions.pop_front().expect("front exists");
            let label = submission.record.label.clone();
            let mut records = Vec::with_capacity(submission.dispatches.len());
            for mut dispatch in submission.dispatches {
                let times = match dispatch.times {
                    Some(times) => Some(times),
                    None => self.match_record(profiler, &mut dispatch, kernels, previous_end),
                };
                if let Some((start, end)) = times {
                    records.extend(dispatch.meta.records(
                        &label,
                        submission.record.submission,
                        dispatch.index,
                        submission.record.token,
                        start,
                        end.max(start),
                    ));
                }
            }
            profiler.record_submission(submission.record, records);
        }
    }

    /// The next CUPTI record, if it is the dispatch's kernel (any kernel,
    /// for a library call's, whose name it then takes). Once they do not
    /// line up, dispatch times from CUPTI are dropped for good (one warning)
    /// rather than attributed to the wrong kernels.
    fn match_record(
        &self,
        profiler: &Profiler,
        dispatch: &mut ResolvedDispatch,
        kernels: &mut VecDeque<KernelActivity>,
        previous_end: &mut u64,
    ) -> Option<(u64, u64)> {
        let clock = self.clock.as_ref()?;
        if !self.lined_up.load(Ordering::Relaxed) {
            return None;
        }
        let meta = &mut dispatch.meta;
        let activity = kernels.pop_front();
        match activity {
            Some(activity) if dispatch.library || activity.name == *meta.kernel => {
                if dispatch.library {
                    meta.kernel = Arc::from(activity.name);
                }
                let (start, end) = after_previous(activity.start, activity.end, previous_end);
                Some((clock.to_host(start), clock.to_host(end)))
            }
            other => {
                self.lined_up.store(false, Ordering::Relaxed);
                kernels.clear();
                profiler.warn_once(
                    "cupti-mismatch",
                    &format!(
                        "kernelscope: CUPTI records do not line up with the dispatches (expected `{}`, got {:?}); dispatch times from CUPTI are dropped from here on",
                        meta.kernel,
                        other.map(|activity| activity.name)
                    ),
                );
                None
            }
        }
    }
}

impl Drop for CuptiMatcher {
    fn drop(&mut self) {
        // CUPTI's records are collected process-wide by stream; a stream
        // that is going away will never claim the ones still waiting.
        if let Some(clock) = &self.clock {
            super::cupti::forget(clock.key());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::after_previous;

    #[test]
    fn an_early_kernel_is_timed_from_its_predecessors_end() {
        let mut previous_end = 0;
        assert_eq!(after_previous(100, 200, &mut previous_end), (100, 200));
        // Launched early at 150, its predecessor ended at 200.
        assert_eq!(after_previous(150, 260, &mut previous_end), (200, 260));
        // A gap stays a gap.
        assert_eq!(after_previous(300, 310, &mut previous_end), (300, 310));
        // A kernel that ended before its predecessor (never seen on one
        // stream) gets no time rather than a negative one.
        assert_eq!(after_previous(305, 308, &mut previous_end), (308, 308));
        assert_eq!(previous_end, 310);
    }
}
