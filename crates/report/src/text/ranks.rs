//! The text report of a split run (tensor parallelism): per rank its
//! counters and the time its collectives took and waited; per rank its
//! steps cut into compute, communication and idle, how often it was the
//! slowest, and the steps' imbalance; per scope what
//! communication cost and how long the fastest rank waited for the slowest
//! (the imbalance), identical layers folded in the short report. Nothing
//! for a run on one device.

use std::collections::HashMap;
use std::fmt::Write;

use kernelscope::profile::{
    CollectiveCost, DispatchRecord, FoldInput, Profile, collective_costs, rank_steps,
};

use super::folds::{fold_labels, shown_as};
use super::options::ReportOptions;
use super::table::table;
use crate::rank_steps::{RANK_STEPS_NOTE, each_step, imbalance_line, rank_means};
use crate::summary::saturating_sum;
use crate::tables::{ms, us};

/// The ranks' table and the collectives' table of a split run.
pub(super) fn render_ranks(profile: &Profile, options: ReportOptions, out: &mut String) {
    let Some(topology) = &profile.conditions.topology else {
        return;
    };
    let _ = writeln!(out, "\nranks: {}", topology.describe());
    let tokens = profile.timed_tokens().0.max(1) as f64;
    let (costs, unmatched) = collective_costs(profile);
    render_rank_table(profile, &costs, tokens, out);
    render_steps(profile, options, out);
    if let Some(note) = unmatched {
        let _ = writeln!(out, "collectives: {note}");
        return;
    }
    if costs.is_empty() {
        return;
    }
    let costs = if options.full { costs } else { fold_costs(costs) };
    render_collective_table(&costs, tokens, out);
}

/// Per rank its steps' compute, communication and idle (means over the
/// steps) and how often it was the slowest; then the imbalance; with
/// `--full`, one row per step.
fn render_steps(profile: &Profile, options: ReportOptions, out: &mut String) {
    let (steps, note) = rank_steps(profile);
    if let Some(note) = note {
        let _ = writeln!(out, "steps: {note}");
    }
    let Some(imbalance) = imbalance_line(&steps) else {
        return;
    };
    let _ = writeln!(out, "{RANK_STEPS_NOTE}, means over {} steps:", steps.len());
    let (header, rows) = rank_means(&steps);
    let _ = writeln!(out, "{}", table(&header, rows));
    let _ = writeln!(out, "{imbalance}");
    if options.full {
        let (header, rows) = each_step(&steps);
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        let _ = writeln!(out, "{}", table(&header, rows));
    }
}

/// One row per rank: its device, counters, busy time and collectives.
fn render_rank_table(profile: &Profile, costs: &[(String, CollectiveCost)], tokens: f64, out: &mut String) {
    let header = [
        "rank",
        "device",
        "dispatches",
        "submissions",
        "syncs",
        "busy ms",
        "collectives",
        "collective µs/token",
        "waiting µs/token",
    ];
    let rows = profile.rank_views().into_iter().map(|view| {
        let busy = saturating_sum(view.dispatches.iter().map(|record| record.duration_ns()));
        let collectives: Vec<&DispatchRecord> = view
            .dispatches
            .iter()
            .filter(|record| record.op_kind.is_collective())
            .collect();
        let collective_ns = saturating_sum(collectives.iter().map(|record| record.duration_ns()));
        let waiting = saturating_sum(costs.iter().map(|(_, cost)| cost.waiting_ns[view.rank]));
        vec![
            view.rank.to_string(),
            view.device.to_string(),
            view.counters.dispatches.to_string(),
            view.counters.submissions.to_string(),
            view.counters.syncs.to_string(),
            ms(busy),
            collectives.len().to_string(),
            us(collective_ns as f64 / tokens),
            us(waiting as f64 / tokens),
        ]
    });
    let _ = writeln!(out, "{}", table(&header, rows));
}

/// One row per scope group: what its collectives cost per token, and which
/// rank was the slowest to arrive.
fn render_collective_table(costs: &[(String, CollectiveCost)], tokens: f64, out: &mut String) {
    let header = [
        "scope",
        "collectives/token",
        "communication µs/token",
        "bus GB/s",
        "imbalance µs/token",
        "slowest rank",
    ];
    let rows = costs.iter().map(|(group, cost)| {
        // The rank that waited least arrived last: the slowest.
        let slowest = cost
            .waiting_ns
            .iter()
            .enumerate()
            .min_by_key(|(_, waiting)| **waiting)
            .map_or(0, |(rank, _)| rank);
        let bandwidth = if cost.communication_ns > 0 {
            format!("{:.1}", cost.bytes as f64 / cost.communication_ns as f64)
        } else {
            "-".into()
        };
        vec![
            group.clone(),
            format!("{:.1}", cost.count as f64 / tokens),
            us(cost.communication_ns as f64 / tokens),
            bandwidth,
            us(cost.imbalance_ns() as f64 / tokens),
            slowest.to_string(),
        ]
    });
    let _ = writeln!(
        out,
        "collectives per scope (communication: from the last rank's arrival to the end; imbalance: the longest any rank waited for the last):"
    );
    let _ = writeln!(out, "{}", table(&header, rows));
}

/// Collective costs with the scopes of identical layers folded into one
/// row each (compared by communication time), their costs summed, rows in
/// the order their first scope came.
fn fold_costs(costs: Vec<(String, CollectiveCost)>) -> Vec<(String, CollectiveCost)> {
    let inputs: Vec<FoldInput> = costs
        .iter()
        .map(|(key, cost)| FoldInput {
            key: key.clone(),
            value: cost.communication_ns as f64,
            relative_spread: None,
            signature: format!("{} collectives, {} B", cost.count, cost.bytes),
        })
        .collect();
    let labels = fold_labels(&inputs);
    let mut folded: Vec<(String, CollectiveCost)> = Vec::new();
    let mut position: HashMap<String, usize> = HashMap::new();
    for (key, cost) in costs {
        let label = shown_as(&labels, key);
        let slot = *position.entry(label.clone()).or_insert_with(|| {
            let empty = CollectiveCost {
                count: 0,
                communication_ns: 0,
                waiting_ns: vec![0; cost.waiting_ns.len()],
                bytes: 0,
            };
            folded.push((label, empty));
            folded.len() - 1
        });
        let total = &mut folded[slot].1;
        total.count += cost.count;
        total.communication_ns = total.communication_ns.saturating_add(cost.communication_ns);
        total.bytes = total.bytes.saturating_add(cost.bytes);
        for (sum, waited) in total.waiting_ns.iter_mut().zip(&cost.waiting_ns) {
            *sum = sum.saturating_add(*waited);
        }
    }
    folded
}
