//! The tables of a split run's steps, shared by the text and the HTML
//! renderings: per rank its steps' compute, communication and idle (means)
//! and how often it was the slowest; the imbalance in one line; and one
//! row per step.

use kernelscope::profile::{RankStep, RankStepTime};

use crate::tables::us;

/// What the per-rank table's figures are.
pub(crate) const RANK_STEPS_NOTE: &str = "per step on each rank's device (compute: a kernel other than a collective ran; communication: only collectives, their waiting included; idle: nothing ran; slowest: computed longest)";

/// One row per rank of `steps` (at least one): the means over the steps
/// of its span, compute, communication and idle, and the steps in which
/// it was the slowest.
pub(crate) fn rank_means(steps: &[RankStep]) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let header = vec![
        "rank",
        "step µs",
        "compute µs",
        "communication µs",
        "idle µs",
        "slowest in",
    ];
    let count = steps.len().max(1) as f64;
    let ranks = steps.first().map_or(0, |step| step.ranks.len());
    let rows = (0..ranks)
        .map(|rank| {
            let mean = |part: fn(&RankStepTime) -> u64| {
                us(steps
                    .iter()
                    .map(|step| part(&step.ranks[rank]) as f64)
                    .sum::<f64>()
                    / count)
            };
            let slowest = steps.iter().filter(|step| step.slowest_rank() == rank).count();
            vec![
                rank.to_string(),
                mean(|time| time.span_ns),
                mean(|time| time.compute_ns),
                mean(|time| time.communication_ns),
                mean(|time| time.idle_ns),
                format!("{slowest} of {} steps", steps.len()),
            ]
        })
        .collect();
    (header, rows)
}

/// The steps' imbalance in one line: its mean, and the worst step with
/// its slowest rank. `None` without steps.
pub(crate) fn imbalance_line(steps: &[RankStep]) -> Option<String> {
    let worst = steps
        .iter()
        .max_by_key(|step| (step.imbalance_ns(), std::cmp::Reverse(step.position)))?;
    let total: u64 = steps.iter().map(RankStep::imbalance_ns).sum();
    Some(format!(
        "imbalance (the slowest rank's compute less the fastest's): {} µs a step on average, at most {} µs (step {}, rank {} slowest)",
        us(total as f64 / steps.len() as f64),
        us(worst.imbalance_ns() as f64),
        worst.position,
        worst.slowest_rank()
    ))
}

/// One row per step: each rank's compute, communication and idle, the
/// slowest rank and the imbalance.
pub(crate) fn each_step(steps: &[RankStep]) -> (Vec<String>, Vec<Vec<String>>) {
    let ranks = steps.first().map_or(0, |step| step.ranks.len());
    let header = std::iter::once("step".to_string())
        .chain((0..ranks).map(|rank| format!("rank {rank} compute / comm / idle µs")))
        .chain(["slowest".to_string(), "imbalance µs".to_string()])
        .collect();
    let rows = steps
        .iter()
        .map(|step| {
            std::iter::once(step.position.to_string())
                .chain(step.ranks.iter().map(|time| {
                    format!(
                        "{} / {} / {}",
                        us(time.compute_ns as f64),
                        us(time.communication_ns as f64),
                        us(time.idle_ns as f64)
                    )
                }))
                .chain([step.slowest_rank().to_string(), us(step.imbalance_ns() as f64)])
                .collect()
        })
        .collect();
    (header, rows)
}
