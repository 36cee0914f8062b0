//! Profiles of a model split over several devices (tensor parallelism): the
//! topology the run used, every other rank's records on rank 0's clock, and
//! what the collectives cost: for each collective (matched across ranks by
//! its order, since every rank issues the same ones) the time the ranks
//! spent waiting for the last one to arrive, and the communication after it.

use std::collections::BTreeMap;

use super::aggregate::layer_of;
use super::conditions::Topology;
use super::records::RankRecords;
use super::{CounterSnapshot, DispatchRecord, Profile, TokenRecord};

/// Moves a time by `offset_ns` (never below 0).
fn shifted(ns: u64, offset_ns: i128) -> u64 {
    (i128::from(ns) + offset_ns).max(0) as u64
}

impl RankRecords {
    /// Rank `rank`'s records from its own `profile`, whose clock reads
    /// `offset_ns` less than rank 0's at the same instant.
    pub fn from_profile(rank: usize, profile: Profile, offset_ns: i128) -> RankRecords {
        let Profile {
            conditions,
            counters,
            mut tokens,
            mut submissions,
            mut dispatches,
            ..
        } = profile;
        for token in &mut tokens {
            token.start_ns = shifted(token.start_ns, offset_ns);
            token.end_ns = shifted(token.end_ns, offset_ns);
        }
        for submission in &mut submissions {
            submission.start_ns = shifted(submission.start_ns, offset_ns);
            submission.end_ns = shifted(submission.end_ns, offset_ns);
            if let Some(enqueue) = &mut submission.enqueue {
                enqueue.host_ns = shifted(enqueue.host_ns, offset_ns);
            }
        }
        for dispatch in &mut dispatches {
            dispatch.start_ns = shifted(dispatch.start_ns, offset_ns);
            dispatch.end_ns = shifted(dispatch.end_ns, offset_ns);
        }
        RankRecords {
            rank,
            device: conditions.device,
            counters,
            tokens,
            submissions,
            dispatches,
        }
    }
}

impl Profile {
    /// This profile (rank 0's) joined by the other ranks' profiles of one
    /// split run, `others[i]` being rank i + 1's with its clock's offset
    /// from rank 0's (`offset_ns` added to its times puts them on rank 0's
    /// clock), under `topology`.
    pub fn with_ranks(mut self, topology: Topology, others: Vec<(Profile, i128)>) -> Profile {
        self.conditions.topology = Some(topology);
        for (position, (profile, offset_ns)) in others.into_iter().enumerate() {
            self.warnings.extend(
                profile
                    .warnings
                    .iter()
                    .filter(|warning| !self.warnings.contains(warning))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
            self.ranks
                .push(RankRecords::from_profile(position + 1, profile, offset_ns));
        }
        self
    }
}

/// One rank's view for the tables: rank 0's records are the profile's own.
pub struct RankView<'a> {
    /// The rank.
    pub rank: usize,
    /// Its device.
    pub device: &'a str,
    /// Its counters.
    pub counters: &'a CounterSnapshot,
    /// Its timed dispatches.
    pub dispatches: &'a [DispatchRecord],
    /// Its tokens (steps).
    pub tokens: &'a [TokenRecord],
}

impl Profile {
    /// Every rank's records, rank 0 (the profile's own) first; one entry for
    /// a profile of one device.
    pub fn rank_views(&self) -> Vec<RankView<'_>> {
        let mut views = vec![RankView {
            rank: 0,
            device: &self.conditions.device,
            counters: &self.counters,
            dispatches: &self.dispatches,
            tokens: &self.tokens,
        }];
        views.extend(self.ranks.iter().map(|records| RankView {
            rank: records.rank,
            device: &records.device,
            counters: &records.counters,
            dispatches: &records.dispatches,
            tokens: &records.tokens,
        }));
        views
    }
}

/// What the collectives of one scope group (a layer, `embed`, `lm_head`) cost.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CollectiveCost {
    /// Collectives per rank in the group.
    pub count: usize,
    /// Communication: from the last rank's arrival to the end, on the rank
    /// that finished first (ns, summed).
    pub communication_ns: u64,
    /// Per rank, the time spent waiting for the last rank to arrive (ns, summed).
    pub waiting_ns: Vec<u64>,
    /// Bus bytes per rank (summed).
    pub bytes: u64,
}

impl CollectiveCost {
    /// The most any rank waited: the imbalance the slowest rank caused.
    pub fn imbalance_ns(&self) -> u64 {
        self.waiting_ns.iter().copied().max().unwrap_or(0)
    }
}

/// The collectives' cost per scope group, in order of first appearance,
/// and a note where the ranks' collectives could not be matched (different
/// counts or kinds). Empty for a profile of one device.
pub fn collective_costs(profile: &Profile) -> (Vec<(String, CollectiveCost)>, Option<String>) {
    let views = profile.rank_views();
    if views.len() < 2 {
        return (Vec::new(), None);
    }
    let collectives: Vec<Vec<&DispatchRecord>> = views
        .iter()
        .map(|view| {
            view.dispatches
                .iter()
                .filter(|record| record.op_kind.is_collective())
                .collect()
        })
        .collect();
    let count = collectives[0].len();
    if let Some(view) = views
        .iter()
        .zip(&collectives)
        .find(|(_, list)| list.len() != count)
    {
        return (
            Vec::new(),
            Some(format!(
                "rank 0 timed {count} collectives but rank {} timed {}: not matched",
                view.0.rank,
                view.1.len()
            )),
        );
    }
    let mut order: Vec<String> = Vec::new();
    let mut costs: BTreeMap<String, CollectiveCost> = BTreeMap::new();
    for index in 0..count {
        let instance: Vec<&DispatchRecord> = collectives.iter().map(|list| list[index]).collect();
        if instance
            .iter()
            .any(|record| record.op_kind != instance[0].op_kind)
        {
            return (
                Vec::new(),
                Some(format!(
                    "collective {index} differs in kind between ranks: not matched"
                )),
            );
        }
        let last_arrival = instance.iter().map(|record| record.start_ns).max().unwrap_or(0);
        let communication = instance
            .iter()
            .map(|record| record.end_ns.saturating_sub(last_arrival))
            .min()
            .unwrap_or(0);
        let group = layer_of(&instance[0].scope);
        let cost = costs.entry(group.clone()).or_insert_with(|| {
            order.push(group);
            CollectiveCost {
                waiting_ns: vec![0; views.len()],
                ..CollectiveCost::default()
            }
        });
        cost.count += 1;
        cost.communication_ns += communication;
        cost.bytes += instance[0].bytes;
        for (rank, record) in instance.iter().enumerate() {
            cost.waiting_ns[rank] += last_arrival.saturating_sub(record.start_ns);
        }
    }
    let costs = order
        .into_iter()
        .map(|group| {
            let cost = costs.remove(&group).expect("listed when inserted");
            (group, cost)
        })
        .collect();
    (costs, None)
}
