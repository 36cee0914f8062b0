//! The token lines of the text report: how many prefill and decode tokens,
//! the decode rate, and the first and last token's time layer by layer (in
//! the short report, one line per run of identical layers).

use std::collections::HashMap;
use std::fmt::Write;

use kernelscope::profile::{DispatchRecord, Phase, Profile, TokenRecord, aggregate, layer_of};

use super::folds::shown_as;
use crate::summary::op_of;
use crate::tables::{ms, us};

/// The token summary and the first and last token's lines, layers folded
/// under `layer_labels` (empty: every layer its own line).
pub(super) fn render_tokens(profile: &Profile, layer_labels: &HashMap<String, String>, out: &mut String) {
    if profile.tokens.is_empty() {
        return;
    }
    let count = |phase| profile.tokens.iter().filter(|token| token.phase == phase).count();
    let decode: Vec<&TokenRecord> = profile
        .tokens
        .iter()
        .filter(|token| token.phase == Phase::Decode)
        .collect();
    let _ = writeln!(
        out,
        "\ntokens: {} prefill, {} decode",
        count(Phase::Prefill),
        count(Phase::Decode)
    );
    let (timed, all) = profile.timed_tokens();
    if timed < all {
        let selection = profile
            .conditions
            .profiled_tokens
            .map_or_else(|| "a selection".to_string(), |selection| selection.to_string());
        let _ = writeln!(
            out,
            "timed: {timed} of {all} tokens (--profile-tokens {selection}); per-token times are means over the timed tokens, counters cover every token"
        );
    }
    if !decode.is_empty() {
        // Saturating: a loaded profile's token times were checked to add up
        // within u64; summed in f64 would lose nanoseconds on long runs.
        let total = decode
            .iter()
            .fold(0u64, |total, token| total.saturating_add(token.duration_ns()));
        let mean = total as f64 / decode.len() as f64;
        // Tokens that took no measurable time have no rate, not an infinite one.
        let rate = if mean > 0.0 {
            format!("{:.1}", 1e9 / mean)
        } else {
            "-".to_string()
        };
        let _ = writeln!(
            out,
            "decode: {} ms per token on average, {rate} tokens/s (host wall clock)",
            ms(mean as u64),
        );
    }
    // The first and last timed tokens: the others have no records.
    let shown: Vec<&TokenRecord> = if decode.is_empty() {
        profile.tokens.iter().filter(|token| token.timed).collect()
    } else {
        decode.into_iter().filter(|token| token.timed).collect()
    };
    if let Some(first) = shown.first() {
        render_token(profile, first, "first", layer_labels, out);
    }
    if shown.len() > 1
        && let Some(last) = shown.last()
    {
        render_token(profile, last, "last", layer_labels, out);
    }
}

/// One line per layer of a token: `layer.0  1.234 µs (MatVec×7 1.0 µs, ...)`;
/// in the short report one line per run of identical layers (`labels`, the
/// folds of the per-layer table: whether a layer differs is judged over the
/// whole run, not one token's jitter), their times each layer's mean in
/// this token (`layer.0–15 ×16 ±0.4%  87.0 µs each`).
fn render_token(
    profile: &Profile,
    token: &TokenRecord,
    title: &str,
    labels: &HashMap<String, String>,
    out: &mut String,
) {
    let _ = writeln!(
        out,
        "\n{title}: token {} ({:?}) {} ms, {} dispatches, {} syncs",
        token.index,
        token.phase,
        ms(token.duration_ns()),
        token.counters.dispatches,
        token.counters.syncs
    );
    let records: Vec<_> = profile
        .dispatches
        .iter()
        .filter(|record| record.token == Some(token.index))
        .collect();
    if records.is_empty() {
        return;
    }
    let mut members: HashMap<&str, u64> = HashMap::new();
    for label in labels.values() {
        *members.entry(label.as_str()).or_insert(0) += 1;
    }
    let row_of = |record: &DispatchRecord| shown_as(labels, layer_of(&record.scope));
    // Each row's ops, grouped in one pass: a token of many layers must not
    // cost a scan of its records per layer.
    let mut ops_by_row: HashMap<String, Vec<&DispatchRecord>> = HashMap::new();
    for record in &records {
        ops_by_row.entry(row_of(record)).or_default().push(record);
    }
    let rows = aggregate(records.iter().copied(), row_of);
    let width = rows
        .iter()
        .map(|row| row.key.chars().count())
        .max()
        .unwrap_or(0)
        .max(16);
    for row in rows {
        let count = members.get(row.key.as_str()).copied().unwrap_or(1).max(1);
        let in_row = ops_by_row.get(&row.key).map(Vec::as_slice).unwrap_or_default();
        let ops = aggregate(in_row.iter().copied(), op_of);
        let parts: Vec<String> = ops
            .iter()
            .map(|op| {
                let calls = op.calls / count;
                let times = if calls > 1 {
                    format!("×{calls}")
                } else {
                    String::new()
                };
                format!("{}{times} {} µs", op.key, us(op.total_ns as f64 / count as f64))
            })
            .collect();
        let each = if count > 1 { " each" } else { "" };
        let _ = writeln!(
            out,
            "  {:<width$} {:>9} µs{each}  ({})",
            row.key,
            us(row.total_ns as f64 / count as f64),
            parts.join(", ")
        );
    }
}
