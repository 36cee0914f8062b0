//! A rank's records from its placed units: submissions (a graph launch,
//! or a step's eager work on one stream), their dispatch records, and one
//! token per step with what happened in it.

use std::collections::HashMap;
use std::sync::Arc;

use kernelscope_trace::ApiCall;

use super::parts::Unit;
use super::steps;
use crate::profile::{CounterSnapshot, DispatchRecord, Phase, SubmissionRecord, TokenRecord};

/// Groups units into submissions (a graph launch; else a step's, or a gap
/// between steps', work on one stream) in order of start, with their
/// dispatch records.
pub(super) fn submissions_of(
    units: &[Unit],
    found: &steps::Steps,
    scope_of: impl Fn(&Unit) -> Arc<str>,
) -> (Vec<SubmissionRecord>, Vec<DispatchRecord>) {
    #[derive(PartialEq, Eq, Hash, Clone, Copy)]
    enum Group {
        Graph(u32),
        Eager { segment: usize, stream: u32 },
    }
    let starts: Vec<u64> = found.spans.iter().map(|&(start, _)| start).collect();
    let mut groups: HashMap<(Option<usize>, Group), Vec<usize>> = HashMap::new();
    for (position, unit) in units.iter().enumerate() {
        let step = found.of_unit[position];
        let group = if unit.graph != 0 {
            Group::Graph(unit.correlation)
        } else {
            // Outside steps, work between two steps is one group per stream.
            let segment = step.unwrap_or_else(|| starts.partition_point(|&start| start <= unit.start_ns));
            Group::Eager {
                segment,
                stream: unit.stream,
            }
        };
        groups.entry((step, group)).or_default().push(position);
    }
    let mut ordered: Vec<_> = groups.into_iter().collect();
    ordered.sort_by_key(|(_, members)| units[members[0]].start_ns);
    let mut submissions = Vec::with_capacity(ordered.len());
    let mut dispatches = Vec::with_capacity(units.len());
    for (number, ((step, group), members)) in ordered.into_iter().enumerate() {
        let label: Arc<str> = match group {
            Group::Graph(_) => Arc::from("graph launch"),
            Group::Eager { stream, .. } => Arc::from(format!("stream {stream}")),
        };
        let token = step.map(|step| step as u32);
        let first = &units[members[0]];
        let end = members
            .iter()
            .map(|&member| units[member].end_ns)
            .max()
            .unwrap_or(first.end_ns);
        submissions.push(SubmissionRecord {
            label: label.clone(),
            submission: number as u64,
            stream: first.stream,
            token,
            start_ns: first.start_ns,
            end_ns: end,
            dispatches: members.len() as u32,
            enqueue: None,
            idle: None,
        });
        for (index, &member) in members.iter().enumerate() {
            let unit = &units[member];
            dispatches.push(DispatchRecord {
                label: label.clone(),
                submission: number as u64,
                index: index as u32,
                kernel: Arc::from(unit.name.as_str()),
                // Another program's kernel declares nothing to us, and its
                // name follows no naming kscope can trust to say a format.
                format: None,
                op_kind: unit.op_kind,
                scope: scope_of(unit),
                stream: unit.stream,
                token,
                start_ns: unit.start_ns,
                end_ns: unit.end_ns,
                bytes: unit.bytes,
                bytes_written: unit.bytes_written,
                flops: 0,
                roles: Default::default(),
                measured_bytes: 0,
                in_kernel: None,
            });
        }
    }
    dispatches.sort_by_key(|dispatch| (dispatch.start_ns, dispatch.submission, dispatch.index));
    (submissions, dispatches)
}

/// One token per step, with what happened in it.
pub(super) fn tokens_of(
    found: &steps::Steps,
    units: &[Unit],
    submissions: &[SubmissionRecord],
    graph_launches: &[ApiCall],
    syncs: &[ApiCall],
) -> Vec<TokenRecord> {
    // Calls are sorted by start: those starting inside a span, by bisection.
    let within = |calls: &[ApiCall], (start, end): (u64, u64)| {
        let first = calls.partition_point(|call| call.start_ns < start);
        let past = calls.partition_point(|call| call.start_ns <= end);
        past.saturating_sub(first) as u64
    };
    let mut members: Vec<Vec<&Unit>> = vec![Vec::new(); found.spans.len()];
    for (unit, step) in units.iter().zip(&found.of_unit) {
        if let Some(step) = *step {
            members[step].push(unit);
        }
    }
    let mut step_submissions = vec![0u64; found.spans.len()];
    for submission in submissions {
        if let Some(token) = submission.token {
            step_submissions[token as usize] += 1;
        }
    }
    found
        .spans
        .iter()
        .zip(members)
        .enumerate()
        .map(|(step, (&span, members))| TokenRecord {
            index: step as u32,
            phase: Phase::Decode,
            start_ns: span.0,
            end_ns: span.1,
            counters: CounterSnapshot {
                dispatches: members.iter().filter(|unit| unit.kernel).count() as u64,
                submissions: step_submissions[step],
                syncs: within(syncs, span),
                graph_launches: within(graph_launches, span),
                host_device_copies: members.iter().filter(|unit| unit.host_copy).count() as u64,
                ..CounterSnapshot::default()
            },
            timed: true,
        })
        .collect()
}
