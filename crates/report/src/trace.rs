//! The Chrome trace-event file (`chrome://tracing`, Perfetto): one track per
//! stream with submissions as labeled slices and their dispatches nested
//! inside (a kernel timed inside it by phase as one slice per phase,
//! `kernel · phase`), plus a track of tokens. Timestamps are µs since the profiler's
//! epoch. A split run has a process per rank (device), all on rank 0's clock.
//! A window of tokens keeps a long run's trace small enough to open.

use std::io::Write;
use std::ops::Range;

use kernelscope::profile::{DispatchRecord, Profile, SubmissionRecord, TokenRecord};
use serde_json::{Value, json};

/// Track id of the token track (streams use their own number).
const TOKEN_TRACK: u32 = 1_000_000;

fn micros(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// The trace of `profile` as a JSON value with a `traceEvents` array.
pub fn chrome_trace(profile: &Profile) -> Value {
    chrome_trace_of_tokens(profile, None)
}

/// The trace of the tokens of `profile` numbered in `window` (all with
/// `None`): their token slices, submissions and dispatches only, so that
/// a trace of a few tokens of a long run stays small.
pub fn chrome_trace_of_tokens(profile: &Profile, window: Option<Range<u32>>) -> Value {
    let mut events = Vec::new();
    let collected = each_event(profile, window, &mut |event| {
        events.push(event);
        Ok(())
    });
    collected.expect("collecting into memory cannot fail");
    json!({ "traceEvents": events, "displayTimeUnit": "ns" })
}

/// Writes the JSON text of [`chrome_trace_of_tokens`] to `writer` one event
/// at a time: a trace of a million kernels holds one event in memory, not
/// a tree of them all (several GB).
pub fn write_chrome_trace(
    profile: &Profile,
    window: Option<Range<u32>>,
    writer: &mut dyn Write,
) -> std::io::Result<()> {
    writer.write_all(b"{\"traceEvents\":[")?;
    let mut first = true;
    each_event(profile, window, &mut |event| {
        if !first {
            writer.write_all(b",")?;
        }
        first = false;
        serde_json::to_writer(&mut *writer, &event).map_err(std::io::Error::other)
    })?;
    writer.write_all(b"],\"displayTimeUnit\":\"ns\"}")
}

/// Hands every event of the trace to `emit`, in file order.
fn each_event(
    profile: &Profile,
    window: Option<Range<u32>>,
    emit: &mut dyn FnMut(Value) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let split = !profile.ranks.is_empty();
    let name = |rank: usize, device: &str| {
        if split {
            format!("kernelscope rank {rank}: {device}")
        } else {
            format!("kernelscope {device}")
        }
    };
    let backend = &profile.conditions.backend;
    let rank_zero = Track {
        name: name(0, &profile.conditions.device),
        backend,
        tokens: &profile.tokens,
        submissions: &profile.submissions,
        dispatches: &profile.dispatches,
        window: window.clone(),
    };
    rank_zero.events(1, emit)?;
    for records in &profile.ranks {
        let track = Track {
            name: name(records.rank, &records.device),
            backend,
            tokens: &records.tokens,
            submissions: &records.submissions,
            dispatches: &records.dispatches,
            window: window.clone(),
        };
        track.events(records.rank as u32 + 1, emit)?;
    }
    Ok(())
}

/// One device's records, as one process of the trace.
struct Track<'a> {
    name: String,
    backend: &'a str,
    tokens: &'a [TokenRecord],
    submissions: &'a [SubmissionRecord],
    dispatches: &'a [DispatchRecord],
    /// The tokens kept; records of other tokens, or of none, are left out.
    window: Option<Range<u32>>,
}

impl Track<'_> {
    fn kept(&self, token: Option<u32>) -> bool {
        match &self.window {
            None => true,
            Some(window) => token.is_some_and(|token| window.contains(&token)),
        }
    }

    fn events(
        &self,
        process: u32,
        emit: &mut dyn FnMut(Value) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        emit(json!({
            "name": "process_name", "ph": "M", "pid": process, "tid": 0,
            "args": { "name": &self.name },
        }))?;
        let mut streams: Vec<u32> = self
            .submissions
            .iter()
            .map(|s| s.stream)
            .chain(self.dispatches.iter().map(|d| d.stream))
            .collect();
        streams.sort_unstable();
        streams.dedup();
        for stream in &streams {
            emit(json!({
                "name": "thread_name", "ph": "M", "pid": process, "tid": stream,
                "args": { "name": format!("{} stream {stream}", self.backend) },
            }))?;
        }
        if !self.tokens.is_empty() {
            emit(json!({
                "name": "thread_name", "ph": "M", "pid": process, "tid": TOKEN_TRACK,
                "args": { "name": "tokens" },
            }))?;
        }
        for token in self.tokens.iter().filter(|token| self.kept(Some(token.index))) {
            emit(json!({
                "name": format!("token {} ({:?})", token.index, token.phase),
                "cat": "token", "ph": "X", "pid": process, "tid": TOKEN_TRACK,
                "ts": micros(token.start_ns), "dur": micros(token.duration_ns()),
                "args": { "counters": token.counters },
            }))?;
        }
        for submission in self.submissions.iter().filter(|record| self.kept(record.token)) {
            emit(json!({
                "name": &*submission.label, "cat": "submission", "ph": "X", "pid": process,
                "tid": submission.stream, "ts": micros(submission.start_ns),
                "dur": micros(submission.duration_ns()),
                "args": { "submission": submission.submission, "dispatches": submission.dispatches, "token": submission.token },
            }))?;
        }
        for dispatch in self.dispatches.iter().filter(|record| self.kept(record.token)) {
            let mut event = json!({
                "name": dispatch.kernel_and_phase(), "cat": "dispatch", "ph": "X", "pid": process,
                "tid": dispatch.stream, "ts": micros(dispatch.start_ns),
                "dur": micros(dispatch.duration_ns()),
                "args": {
                    "op_kind": dispatch.op_kind, "scope": &*dispatch.scope, "label": &*dispatch.label,
                    "submission": dispatch.submission, "index": dispatch.index, "token": dispatch.token,
                    "bytes": dispatch.bytes, "bytes_written": dispatch.bytes_written, "flops": dispatch.flops,
                },
            });
            // A phase timed inside its kernel says so, and what it waited.
            if let Some(phase) = &dispatch.in_kernel {
                event["args"]["in_kernel"] = json!(phase);
            }
            emit(event)?;
        }
        Ok(())
    }
}
