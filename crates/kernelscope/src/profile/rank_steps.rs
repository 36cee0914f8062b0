//! A split run step by step (a token of kscope's engine, a step of a
//! profiled program): on each rank, the step's span on the device (its
//! first dispatch's start to its last one's end) cut into compute (some
//! kernel other than a collective ran), communication (only collectives
//! ran: their transfers and their waiting for the slowest rank) and idle
//! (nothing ran); then which rank computed longest (the straggler the
//! others waited for) and by how much (the step's imbalance). Steps are
//! matched across ranks by their order, as every rank runs the same ones.

use std::collections::HashMap;

use super::aggregate::Samples;
use super::{DispatchRecord, Profile};

/// One rank's share of one step, in ns on the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RankStepTime {
    /// First dispatch's start to last dispatch's end (0 with no dispatch).
    pub span_ns: u64,
    /// Time some non-collective kernel ran.
    pub compute_ns: u64,
    /// Time only collectives ran.
    pub communication_ns: u64,
    /// Time nothing ran: `span_ns - compute_ns - communication_ns`.
    pub idle_ns: u64,
}

impl RankStepTime {
    /// The names of [`parts`](Self::parts), in order.
    pub const PARTS: [&'static str; 3] = ["compute", "communication", "idle"];

    /// Compute, communication and idle (ns): the span's parts, in order.
    pub fn parts(&self) -> [u64; 3] {
        [self.compute_ns, self.communication_ns, self.idle_ns]
    }
}

/// One step of a split run on every rank.
#[derive(Clone, Debug, PartialEq)]
pub struct RankStep {
    /// The step's position among the timed steps, from 0.
    pub position: usize,
    /// Rank r's share (`ranks[r]`).
    pub ranks: Vec<RankStepTime>,
}

impl RankStep {
    /// The rank that computed longest: the one the others waited for.
    pub fn slowest_rank(&self) -> usize {
        self.ranks
            .iter()
            .enumerate()
            .max_by_key(|(rank, time)| (time.compute_ns, std::cmp::Reverse(*rank)))
            .map_or(0, |(rank, _)| rank)
    }

    /// The longest compute less the shortest: what the slowest rank cost
    /// the fastest in this step.
    pub fn imbalance_ns(&self) -> u64 {
        let computes = self.ranks.iter().map(|time| time.compute_ns);
        let most = computes.clone().max().unwrap_or(0);
        most - computes.min().unwrap_or(0)
    }
}

/// Every timed step of a split run on every rank, and a note where the
/// ranks timed different numbers of steps (the first ones common to all
/// are kept). Empty for a profile of one device.
pub fn rank_steps(profile: &Profile) -> (Vec<RankStep>, Option<String>) {
    let views = profile.rank_views();
    if views.len() < 2 {
        return (Vec::new(), None);
    }
    let per_rank: Vec<Vec<RankStepTime>> = views
        .iter()
        .map(|view| {
            // Each rank's dispatches by step, in one pass (a profiled
            // program's run may hold millions of dispatches over thousands
            // of steps).
            let mut by_token: HashMap<u32, Vec<&DispatchRecord>> = HashMap::new();
            for record in view.dispatches {
                if let Some(token) = record.token {
                    by_token.entry(token).or_default().push(record);
                }
            }
            view.tokens
                .iter()
                .filter(|token| token.timed)
                .map(|token| step_time(by_token.get(&token.index).map_or(&[], Vec::as_slice)))
                .collect()
        })
        .collect();
    let common = per_rank.iter().map(Vec::len).min().unwrap_or(0);
    let note = per_rank
        .iter()
        .enumerate()
        .find(|(_, steps)| steps.len() != per_rank[0].len())
        .map(|(rank, steps)| {
            format!(
                "rank 0 timed {} steps but rank {rank} timed {}: the first {common} of each are set side by side",
                per_rank[0].len(),
                steps.len()
            )
        });
    let steps = (0..common)
        .map(|position| RankStep {
            position,
            ranks: per_rank.iter().map(|steps| steps[position]).collect(),
        })
        .collect();
    (steps, note)
}

/// What `compare` sets side by side for a split run: per rank its steps'
/// compute, communication and idle, and the steps' imbalance, each with
/// one sample a step. Empty for a profile of one device.
pub(super) fn rank_samples(profile: &Profile) -> Vec<(String, Samples)> {
    let (steps, _) = rank_steps(profile);
    let Some(first) = steps.first() else {
        return Vec::new();
    };
    let mut samples = Vec::new();
    for rank in 0..first.ranks.len() {
        for (part, name) in RankStepTime::PARTS.into_iter().enumerate() {
            let values = steps
                .iter()
                .map(|step| step.ranks[rank].parts()[part] as f64)
                .collect();
            samples.push((format!("rank {rank} {name} per step"), Samples::all(values)));
        }
    }
    let imbalance = steps.iter().map(|step| step.imbalance_ns() as f64).collect();
    samples.push(("imbalance per step".to_string(), Samples::all(imbalance)));
    samples
}

/// One step's time on one rank, from its dispatches in that step.
fn step_time(dispatches: &[&DispatchRecord]) -> RankStepTime {
    let mut all: Vec<(u64, u64)> = Vec::new();
    let mut compute: Vec<(u64, u64)> = Vec::new();
    for record in dispatches {
        let interval = (record.start_ns, record.end_ns.max(record.start_ns));
        all.push(interval);
        if !record.op_kind.is_collective() {
            compute.push(interval);
        }
    }
    let span_ns = match (all.iter().map(|i| i.0).min(), all.iter().map(|i| i.1).max()) {
        (Some(start), Some(end)) => end - start,
        _ => 0,
    };
    let busy_ns = covered_ns(&mut all);
    let compute_ns = covered_ns(&mut compute);
    RankStepTime {
        span_ns,
        compute_ns,
        communication_ns: busy_ns - compute_ns,
        idle_ns: span_ns - busy_ns,
    }
}

/// The time the union of `intervals` covers (sorts them).
fn covered_ns(intervals: &mut [(u64, u64)]) -> u64 {
    intervals.sort_unstable();
    let mut covered = 0;
    let mut reach = 0;
    for &(start, end) in intervals.iter() {
        let from = start.max(reach);
        if end > from {
            covered += end - from;
        }
        reach = reach.max(end);
    }
    covered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_intervals_are_counted_once() {
        assert_eq!(covered_ns(&mut [(0, 10), (5, 15), (20, 25)]), 20);
        assert_eq!(covered_ns(&mut [(20, 25), (0, 30)]), 30);
        assert_eq!(covered_ns(&mut []), 0);
    }

    #[test]
    fn the_slowest_rank_computed_longest() {
        let time = |compute_ns| RankStepTime {
            compute_ns,
            ..RankStepTime::default()
        };
        let step = RankStep {
            position: 0,
            ranks: vec![time(40), time(70), time(55)],
        };
        assert_eq!(step.slowest_rank(), 1);
        assert_eq!(step.imbalance_ns(), 30);
        // Ties go to the lowest rank.
        let tied = RankStep {
            position: 1,
            ranks: vec![time(5), time(5)],
        };
        assert_eq!(tied.slowest_rank(), 0);
        assert_eq!(tied.imbalance_ns(), 0);
    }
}
