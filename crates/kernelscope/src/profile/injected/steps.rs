//! A foreign program's steps: what the report calls tokens. kscope's engine
//! marks its tokens; another program does not, so they are found from what
//! it does give, in this order: NVTX ranges of the name `--step` asks for,
//! else its CUDA graph launches, else the spans between its host
//! synchronisations, else the whole run as one step. The rule used is
//! named in the profile.

use std::collections::HashMap;

use kernelscope_trace::{ApiCall, NvtxRange};

use super::names::scope_part;

/// How a program's work was cut into steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepRule {
    /// Each NVTX range of this name is one step.
    Named(String),
    /// Each CUDA graph launch is one step.
    GraphLaunches,
    /// The work launched between two host synchronisations is one step.
    Syncs,
    /// The whole run is one step (the program gave nothing to cut it by).
    Whole,
}

impl StepRule {
    /// `NVTX ranges named "step"`, `graph launches`, ...
    pub fn describe(&self) -> String {
        match self {
            StepRule::Named(name) => format!("NVTX ranges named {name:?}"),
            StepRule::GraphLaunches => "CUDA graph launches".into(),
            StepRule::Syncs => "the spans between host synchronisations".into(),
            StepRule::Whole => {
                "the whole run (no NVTX step, graph launch or synchronisation to cut it by)".into()
            }
        }
    }
}

/// One unit of device work as the step rules see it.
pub(super) struct Placed {
    /// When its launch call began on the host (its own start where no call was seen).
    pub launched_ns: u64,
    /// Its correlation id.
    pub correlation: u32,
    /// The graph it ran in (0: none).
    pub graph: u32,
    /// When it ended on the device.
    pub end_ns: u64,
}

/// Steps found: each one's span, and each unit's step (by position).
pub(super) struct Steps {
    /// The rule that found them.
    pub rule: StepRule,
    /// Each step's start and end, in order.
    pub spans: Vec<(u64, u64)>,
    /// The step of each unit, `None` for work outside every step.
    pub of_unit: Vec<Option<usize>>,
    /// The NVTX range of each named step (to cut it off the scopes).
    pub step_ranges: Vec<u64>,
}

/// What the finder reads of one process.
pub(super) struct Sources<'a> {
    pub units: &'a [Placed],
    pub calls: &'a HashMap<u32, ApiCall>,
    pub ranges: &'a HashMap<u64, (NvtxRange, String)>,
    /// Graph launches and host syncs, by start.
    pub graph_launches: &'a [ApiCall],
    pub syncs: &'a [ApiCall],
}

/// The steps of one process by the first rule that finds any, `wanted`
/// first (a name no range has is said in `warnings`).
pub(super) fn find(sources: &Sources, wanted: Option<&str>, warnings: &mut Vec<String>) -> Steps {
    if let Some(name) = wanted {
        if let Some(steps) = named(sources, name) {
            return steps;
        }
        let mut names: Vec<&str> = sources
            .ranges
            .values()
            .map(|(_, message)| scope_part(message))
            .collect();
        names.sort_unstable();
        names.dedup();
        let shown: Vec<&str> = names.iter().take(8).copied().collect();
        warnings.push(format!(
            "--step {name:?}: the program opened no NVTX range of that name{}",
            if shown.is_empty() {
                " (it opened none at all)".to_string()
            } else {
                format!(
                    " (it opened {}{})",
                    shown.join(", "),
                    if names.len() > 8 { ", …" } else { "" }
                )
            }
        ));
    }
    let is_graph_launch = |unit: &Placed| {
        unit.graph != 0
            && sources
                .graph_launches
                .iter()
                .any(|call| call.correlation == unit.correlation)
    };
    if sources.units.iter().any(is_graph_launch) {
        let launches: Vec<(u64, u32)> = sources
            .graph_launches
            .iter()
            .map(|call| (call.start_ns, call.correlation))
            .collect();
        let by_correlation: HashMap<u32, usize> = launches
            .iter()
            .enumerate()
            .map(|(position, &(_, correlation))| (correlation, position))
            .collect();
        let of_unit = sources
            .units
            .iter()
            .map(|unit| {
                (unit.graph != 0)
                    .then(|| by_correlation.get(&unit.correlation).copied())
                    .flatten()
            })
            .collect();
        let starts = launches.iter().map(|&(start, _)| start).collect();
        let ends = vec![0; launches.len()];
        return compact(
            StepRule::GraphLaunches,
            starts,
            ends,
            of_unit,
            sources.units,
            Vec::new(),
        );
    }
    if !sources.syncs.is_empty() {
        let mut ends: Vec<u64> = sources.syncs.iter().map(|call| call.end_ns).collect();
        ends.sort_unstable();
        let of_unit: Vec<Option<usize>> = sources
            .units
            .iter()
            .map(|unit| Some(ends.partition_point(|&end| end < unit.launched_ns)))
            .collect();
        // A step begins with its first launch; it ends at its sync (or its last kernel).
        let mut starts = vec![u64::MAX; ends.len() + 1];
        for (unit, step) in sources.units.iter().zip(&of_unit) {
            let step = step.expect("every unit has one");
            starts[step] = starts[step].min(unit.launched_ns);
        }
        // A step ends at its sync, the last one at its last kernel.
        let ends = ends.iter().copied().chain([0]).collect();
        return compact(StepRule::Syncs, starts, ends, of_unit, sources.units, Vec::new());
    }
    let start = sources
        .units
        .iter()
        .map(|unit| unit.launched_ns)
        .min()
        .unwrap_or(0);
    let of_unit = vec![Some(0); sources.units.len()];
    compact(
        StepRule::Whole,
        vec![start],
        vec![0],
        of_unit,
        sources.units,
        Vec::new(),
    )
}

/// Steps by NVTX ranges named `name`: a unit belongs to the one its launch
/// was made inside (through the launch's range and its parents; by host
/// time for start/end ranges and launches on other threads).
fn named(sources: &Sources, name: &str) -> Option<Steps> {
    let mut step_ranges: Vec<(u64, u64, u64)> = sources
        .ranges
        .values()
        .filter(|(_, message)| scope_part(message) == name)
        .map(|(range, _)| (range.start_ns, range.end_ns, range.id))
        .collect();
    if step_ranges.is_empty() {
        return None;
    }
    step_ranges.sort_unstable();
    let position_of: HashMap<u64, usize> = step_ranges
        .iter()
        .enumerate()
        .map(|(position, &(_, _, id))| (id, position))
        .collect();
    let of_unit = sources
        .units
        .iter()
        .map(|unit| {
            let mut open = sources.calls.get(&unit.correlation).map_or(0, |call| call.range);
            while open != 0 {
                if let Some(&position) = position_of.get(&open) {
                    return Some(position);
                }
                open = sources.ranges.get(&open).map_or(0, |(range, _)| range.parent);
            }
            // The latest-starting step range open at the launch.
            step_ranges
                .iter()
                .rposition(|&(start, end, _)| start <= unit.launched_ns && unit.launched_ns <= end)
        })
        .collect();
    let starts = step_ranges.iter().map(|&(start, _, _)| start).collect();
    // A named step lasts at least as long as its range.
    let ends = step_ranges.iter().map(|&(_, end, _)| end).collect();
    let ids = step_ranges.iter().map(|&(_, _, id)| id).collect();
    Some(compact(
        StepRule::Named(name.to_string()),
        starts,
        ends,
        of_unit,
        sources.units,
        ids,
    ))
}

/// Drops the steps no unit belongs to and renumbers the rest in order;
/// each step spans from its start to its last unit's end, or to its
/// `ends` entry where that is later.
fn compact(
    rule: StepRule,
    starts: Vec<u64>,
    ends: Vec<u64>,
    of_unit: Vec<Option<usize>>,
    units: &[Placed],
    ids: Vec<u64>,
) -> Steps {
    let mut last_end = vec![None::<u64>; starts.len()];
    for (unit, step) in units.iter().zip(&of_unit) {
        if let Some(step) = *step {
            let end = last_end[step].get_or_insert(unit.end_ns);
            *end = (*end).max(unit.end_ns);
        }
    }
    let mut renumbered = vec![None; starts.len()];
    let mut spans = Vec::new();
    let mut step_ranges = Vec::new();
    for (step, end) in last_end.iter().enumerate() {
        if let Some(end) = *end {
            renumbered[step] = Some(spans.len());
            let start = starts[step].min(end);
            spans.push((start, end.max(ends[step])));
            if let Some(&id) = ids.get(step) {
                step_ranges.push(id);
            }
        }
    }
    let of_unit = of_unit
        .iter()
        .map(|step| step.and_then(|step| renumbered[step]))
        .collect();
    Steps {
        rule,
        spans,
        of_unit,
        step_ranges,
    }
}
