//! The Chrome trace-event file (`chrome://tracing`, Perfetto): one track per
//! stream with submissions as labeled slices and their dispatches nested
//! inside, plus a track of tokens. Timestamps are µs since the profiler's
//! epoch. A split run has a process per rank (device), all on rank 0's clock.

use serde_json::{Value, json};

use super::{DispatchRecord, Profile, SubmissionRecord, TokenRecord};

/// Track id of the token track (streams use their own number).
const TOKEN_TRACK: u32 = 1_000_000;

fn micros(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// The trace of `profile` as a JSON value with a `traceEvents` array.
pub fn chrome_trace(profile: &Profile) -> Value {
    let mut events = Vec::new();
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
    };
    rank_zero.events(1, &mut events);
    for records in &profile.ranks {
        let track = Track {
            name: name(records.rank, &records.device),
            backend,
            tokens: &records.tokens,
            submissions: &records.submissions,
            dispatches: &records.dispatches,
        };
        track.events(records.rank as u32 + 1, &mut events);
    }
    json!({ "traceEvents": events, "displayTimeUnit": "ns" })
}

/// One device's records, as one process of the trace.
struct Track<'a> {
    name: String,
    backend: &'a str,
    tokens: &'a [TokenRecord],
    submissions: &'a [SubmissionRecord],
    dispatches: &'a [DispatchRecord],
}

impl Track<'_> {
    fn events(&self, process: u32, events: &mut Vec<Value>) {
        events.push(json!({
            "name": "process_name", "ph": "M", "pid": process, "tid": 0,
            "args": { "name": &self.name },
        }));
        let mut streams: Vec<u32> = self
            .submissions
            .iter()
            .map(|s| s.stream)
            .chain(self.dispatches.iter().map(|d| d.stream))
            .collect();
        streams.sort_unstable();
        streams.dedup();
        for stream in &streams {
            events.push(json!({
                "name": "thread_name", "ph": "M", "pid": process, "tid": stream,
                "args": { "name": format!("{} stream {stream}", self.backend) },
            }));
        }
        if !self.tokens.is_empty() {
            events.push(json!({
                "name": "thread_name", "ph": "M", "pid": process, "tid": TOKEN_TRACK,
                "args": { "name": "tokens" },
            }));
        }
        for token in self.tokens {
            events.push(json!({
                "name": format!("token {} ({:?})", token.index, token.phase),
                "cat": "token", "ph": "X", "pid": process, "tid": TOKEN_TRACK,
                "ts": micros(token.start_ns), "dur": micros(token.duration_ns()),
                "args": { "counters": token.counters },
            }));
        }
        for submission in self.submissions {
            events.push(json!({
            "name": &*submission.label, "cat": "submission", "ph": "X", "pid": process,
            "tid": submission.stream, "ts": micros(submission.start_ns),
            "dur": micros(submission.duration_ns()),
            "args": { "submission": submission.submission, "dispatches": submission.dispatches, "token": submission.token },
        }));
        }
        for dispatch in self.dispatches {
            events.push(json!({
                "name": &*dispatch.kernel, "cat": "dispatch", "ph": "X", "pid": process,
                "tid": dispatch.stream, "ts": micros(dispatch.start_ns),
                "dur": micros(dispatch.duration_ns()),
                "args": {
                    "op_kind": dispatch.op_kind, "scope": &*dispatch.scope, "label": &*dispatch.label,
                    "submission": dispatch.submission, "index": dispatch.index, "token": dispatch.token,
                    "bytes": dispatch.bytes, "flops": dispatch.flops,
                },
            }));
        }
    }
}
