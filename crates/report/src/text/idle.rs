//! The text report's idle section: how much of each phase's submissions the
//! device spent waiting rather than running a dispatch (before the first,
//! between, after the last), per token, and which ops and layers it waited
//! before. Idle time is a measured cost, often what limits a small model.

use std::collections::HashMap;
use std::fmt::Write;

use kernelscope::profile::{Phase, Profile, SubmissionIdle, idle_before_by, idle_gaps, layer_of};

use super::table::table;
use crate::tables::{ms, us};

/// Rows of the per-op and per-layer idle tables in the short report.
const SHORT_ROWS: usize = 5;

/// The idle section; nothing where no submission has an idle account.
pub(super) fn render_idle(profile: &Profile, full: bool, out: &mut String) {
    let phases = phase_idle(profile);
    if phases.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\ndevice idle inside submissions (measured: the device waiting for work, not a clock error):"
    );
    let header = [
        "phase",
        "tokens",
        "span ms",
        "busy ms",
        "idle before µs/token",
        "between µs/token",
        "after µs/token",
        "idle share (token min–max)",
    ];
    let rows = phases.iter().map(|phase| {
        let per_token = |ns: u64| us(ns as f64 / phase.tokens.max(1) as f64);
        vec![
            phase.name.to_string(),
            phase.tokens.to_string(),
            ms(phase.idle.span_ns()),
            ms(phase.idle.busy_ns),
            per_token(phase.idle.before_ns),
            per_token(phase.idle.between_ns),
            per_token(phase.idle.after_ns),
            format!(
                "{:.1}% ({:.1}–{:.1}%)",
                phase.idle.idle_share() * 100.0,
                phase.lowest_share * 100.0,
                phase.highest_share * 100.0
            ),
        ]
    });
    let _ = writeln!(out, "{}", table(&header, rows));

    // Who waited, over the decode tokens (or every token when none decode).
    let gaps = idle_gaps(&profile.dispatches, &profile.submissions);
    let tokens: std::collections::HashSet<u32> = profile.repetition_tokens().into_iter().collect();
    let records: Vec<_> = profile
        .dispatches
        .iter()
        .filter(|record| tokens.is_empty() || record.token.is_some_and(|token| tokens.contains(&token)))
        .collect();
    // A launch's phases share its one gap.
    let idle_total: u64 = records
        .iter()
        .filter(|record| record.is_launch())
        .map(|record| gaps.get(&(record.submission, record.index)).copied().unwrap_or(0))
        .sum();
    if idle_total == 0 {
        return;
    }
    let by_op = idle_before_by(records.iter().copied(), &gaps, |record| {
        record.op_kind.name().into_owned()
    });
    render_waiters(out, "op", by_op, idle_total, full);
    let by_layer = idle_before_by(records.iter().copied(), &gaps, |record| layer_of(&record.scope));
    render_waiters(out, "layer", by_layer, idle_total, full);
}

/// One phase's idle account over its tokens.
struct PhaseIdle {
    name: &'static str,
    tokens: usize,
    idle: SubmissionIdle,
    lowest_share: f64,
    highest_share: f64,
}

/// Each phase's idle account, summed over its tokens' submissions, with the
/// range of the per-token idle shares.
fn phase_idle(profile: &Profile) -> Vec<PhaseIdle> {
    let mut by_token: HashMap<u32, SubmissionIdle> = HashMap::new();
    for submission in &profile.submissions {
        if let (Some(token), Some(idle)) = (submission.token, submission.idle) {
            let total = by_token.entry(token).or_default();
            *total = total.saturating_add(idle);
        }
    }
    [(Phase::Prefill, "prefill"), (Phase::Decode, "decode")]
        .into_iter()
        .filter_map(|(phase, name)| {
            let shares: Vec<(f64, SubmissionIdle)> = profile
                .tokens
                .iter()
                .filter(|token| token.phase == phase)
                .filter_map(|token| by_token.get(&token.index))
                .map(|idle| (idle.idle_share(), *idle))
                .collect();
            if shares.is_empty() {
                return None;
            }
            Some(PhaseIdle {
                name,
                tokens: shares.len(),
                idle: shares.iter().fold(SubmissionIdle::default(), |sum, (_, idle)| {
                    sum.saturating_add(*idle)
                }),
                lowest_share: shares
                    .iter()
                    .map(|(share, _)| *share)
                    .fold(f64::INFINITY, f64::min),
                highest_share: shares.iter().map(|(share, _)| *share).fold(0.0, f64::max),
            })
        })
        .collect()
}

/// The rows that waited longest, with their share of all the idle time.
fn render_waiters(
    out: &mut String,
    what: &str,
    mut rows: Vec<(String, u64, u64)>,
    idle_total: u64,
    full: bool,
) {
    rows.retain(|(_, _, idle)| *idle > 0);
    rows.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    let hidden = if full {
        0
    } else {
        rows.len().saturating_sub(SHORT_ROWS)
    };
    rows.truncate(rows.len() - hidden);
    let _ = writeln!(
        out,
        "\nidle before each dispatch, by {what} (the device waiting for it to start):"
    );
    let header = [what, "calls", "idle ms", "µs per call", "share of idle"];
    let body = rows.into_iter().map(|(key, calls, idle)| {
        vec![
            key,
            calls.to_string(),
            ms(idle),
            us(idle as f64 / calls.max(1) as f64),
            format!("{:.1}%", idle as f64 * 100.0 / idle_total as f64),
        ]
    });
    let _ = writeln!(out, "{}", table(&header, body));
    if hidden > 0 {
        let _ = writeln!(out, "… {hidden} more (--full shows all)");
    }
}
