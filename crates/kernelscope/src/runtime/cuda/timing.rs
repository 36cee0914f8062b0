//! Submission timing: each committed submission waits here with its event
//! pairs until the host waits for the stream, then its pairs are turned
//! into times (placed through the epoch) and it moves on to the matcher,
//! which hands it to the profiler once CUPTI's records, if any, have come.

use std::sync::{Arc, Mutex};

use super::clock::{CuptiClock, Epoch};
use super::driver::{Event, driver_error};
use super::matching::{CuptiMatcher, ResolvedDispatch, ResolvedSubmission};
use super::stream::DeviceStream;
use crate::error::Result;
use crate::profile::{DispatchMeta, Enqueue, Profiler, SubmissionRecord};

/// A dispatch whose times await the GPU: from an event pair around it
/// (eager, without CUPTI) or from its CUPTI record (`events` is `None`).
pub(crate) struct PendingDispatch {
    pub(super) index: u32,
    pub(super) meta: DispatchMeta,
    pub(super) events: Option<(Event, Event)>,
    /// One of the kernels a library call launched: its CUPTI record may
    /// carry any name, which becomes the record's kernel name.
    pub(super) library: bool,
}

/// A submission whose times await the events' completion.
pub(crate) struct PendingSubmission {
    pub(super) label: Arc<str>,
    /// The token open when the work was committed.
    pub(super) token: Option<u32>,
    pub(super) submission: u64,
    pub(super) dispatches: u32,
    /// Host time spent enqueueing it.
    pub(super) host_enqueue_ns: u64,
    /// Whether the stream was held until the enqueue was done (see `gate.rs`).
    pub(super) gated: bool,
    pub(super) start: Event,
    pub(super) end: Event,
    pub(super) timed_dispatches: Vec<PendingDispatch>,
}

/// The device's submissions in flight, its epoch and its matcher.
pub(crate) struct Timings {
    pending: Mutex<Vec<PendingSubmission>>,
    epoch: Epoch,
    matcher: CuptiMatcher,
}

impl Timings {
    pub(crate) fn new(epoch: Epoch, cupti: Option<CuptiClock>) -> Timings {
        Timings {
            pending: Mutex::new(Vec::new()),
            epoch,
            matcher: CuptiMatcher::new(cupti),
        }
    }

    /// Whether dispatches are timed by CUPTI (in graph replays too).
    pub(crate) fn uses_cupti(&self) -> bool {
        self.matcher.uses_cupti()
    }

    pub(crate) fn push(&self, submission: PendingSubmission) {
        crate::sync::lock(&self.pending).push(submission);
    }

    /// Every submission in flight (the caller has waited for the stream).
    pub(crate) fn take_all(&self) -> Vec<PendingSubmission> {
        std::mem::take(&mut *crate::sync::lock(&self.pending))
    }

    /// The submissions that have finished, oldest first, up to the first
    /// one still running.
    pub(crate) fn take_completed(&self) -> Vec<PendingSubmission> {
        let mut pending = crate::sync::lock(&self.pending);
        let done = pending
            .iter()
            .take_while(|submission| submission.end.is_complete())
            .count();
        pending.drain(..done).collect()
    }

    /// Turns finished submissions' event pairs into times, returns the
    /// events to `stream`'s pool and hands what is ready to the profiler.
    pub(crate) fn resolve(
        &self,
        stream: &DeviceStream,
        profiler: &Profiler,
        pending: Vec<PendingSubmission>,
    ) -> Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        let mut spare = Vec::new();
        let mut resolved = Vec::with_capacity(pending.len());
        for submission in pending {
            resolved.push(self.resolve_one(submission, &mut spare)?);
        }
        stream.give_back_events(spare);
        self.matcher.enqueue(resolved);
        self.matcher.deliver(profiler, false);
        Ok(())
    }

    /// One submission's times; its events go to `spare`.
    fn resolve_one(
        &self,
        submission: PendingSubmission,
        spare: &mut Vec<Event>,
    ) -> Result<ResolvedSubmission> {
        // The start is placed through the epoch; the duration comes from
        // the pair itself, which keeps full precision however long the
        // process has run.
        let start_ns = self.epoch.host_ns(&submission.start)?;
        let span_ms = submission
            .start
            .elapsed_ms(&submission.end)
            .map_err(driver_error("reading a submission time"))?;
        let end_ns = start_ns + (f64::from(span_ms.max(0.0)) * 1e6) as u64;
        let mut dispatches = Vec::with_capacity(submission.timed_dispatches.len());
        for dispatch in submission.timed_dispatches {
            let times = match dispatch.events {
                Some((before, after)) => {
                    // Durations come from the pair itself (finer than epoch offsets).
                    let ms = before
                        .elapsed_ms(&after)
                        .map_err(driver_error("reading a dispatch time"))?;
                    let start = self.epoch.host_ns(&before)?;
                    spare.push(before);
                    spare.push(after);
                    Some((start, start + (f64::from(ms.max(0.0)) * 1e6) as u64))
                }
                None => None,
            };
            dispatches.push(ResolvedDispatch {
                index: dispatch.index,
                meta: dispatch.meta,
                times,
                library: dispatch.library,
            });
        }
        let record = SubmissionRecord {
            label: submission.label,
            submission: submission.submission,
            stream: 0,
            token: submission.token,
            start_ns,
            end_ns,
            dispatches: submission.dispatches,
            enqueue: Some(Enqueue {
                host_ns: submission.host_enqueue_ns,
                device_held: submission.gated,
            }),
            idle: None,
        };
        spare.push(submission.start);
        spare.push(submission.end);
        Ok(ResolvedSubmission { record, dispatches })
    }

    /// See [`CuptiMatcher::deliver`].
    pub(crate) fn deliver(&self, profiler: &Profiler, force: bool) {
        self.matcher.deliver(profiler, force);
    }
}
