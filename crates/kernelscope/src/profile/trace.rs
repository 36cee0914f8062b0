//! The Chrome trace-event file (`chrome://tracing`, Perfetto): one track per
//! stream with submissions as labeled slices and their dispatches nested
//! inside, plus a track of tokens. Timestamps are µs since the profiler's epoch.

use serde_json::{Value, json};

use super::Profile;

/// Track id of the token track (streams use their own number).
const TOKEN_TRACK: u32 = 1_000_000;

fn micros(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// The trace of `profile` as a JSON value with a `traceEvents` array.
pub fn chrome_trace(profile: &Profile) -> Value {
    let process = 1;
    let mut events = vec![json!({
        "name": "process_name", "ph": "M", "pid": process, "tid": 0,
        "args": { "name": format!("kernelscope {}", profile.conditions.device) },
    })];
    let mut streams: Vec<u32> = profile
        .submissions
        .iter()
        .map(|s| s.stream)
        .chain(profile.dispatches.iter().map(|d| d.stream))
        .collect();
    streams.sort_unstable();
    streams.dedup();
    for stream in &streams {
        events.push(json!({
            "name": "thread_name", "ph": "M", "pid": process, "tid": stream,
            "args": { "name": format!("{} stream {stream}", profile.conditions.backend) },
        }));
    }
    if !profile.tokens.is_empty() {
        events.push(json!({
            "name": "thread_name", "ph": "M", "pid": process, "tid": TOKEN_TRACK,
            "args": { "name": "tokens" },
        }));
    }
    for token in &profile.tokens {
        events.push(json!({
            "name": format!("token {} ({:?})", token.index, token.phase),
            "cat": "token", "ph": "X", "pid": process, "tid": TOKEN_TRACK,
            "ts": micros(token.start_ns), "dur": micros(token.duration_ns()),
            "args": { "counters": token.counters },
        }));
    }
    for submission in &profile.submissions {
        events.push(json!({
            "name": &*submission.label, "cat": "submission", "ph": "X", "pid": process,
            "tid": submission.stream, "ts": micros(submission.start_ns),
            "dur": micros(submission.duration_ns()),
            "args": { "submission": submission.submission, "dispatches": submission.dispatches, "token": submission.token },
        }));
    }
    for dispatch in &profile.dispatches {
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
    json!({ "traceEvents": events, "displayTimeUnit": "ns" })
}
