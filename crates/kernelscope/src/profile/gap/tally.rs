//! One side of the gap account measured: its decode tokens' device spans,
//! each dispatch's exclusive time by roles, by layer and by kernel (a
//! kernel timed inside it by phase, each phase under its own roles).

use std::collections::{HashMap, HashSet};

use crate::profile::aggregate::layer_of;
use crate::profile::{DispatchRecord, Profile, Roles};

/// What one side's decode tokens add up to.
pub(super) struct Tally {
    pub tokens: usize,
    pub span_ns: f64,
    pub idle_ns: f64,
    /// Per roles set: ns, calls, bytes (None once a dispatch had none).
    /// The calls are the records of whole launches only: the phases of a
    /// kernel timed inside it are in `phased_launches`.
    pub by_roles: HashMap<Roles, (f64, f64, Option<f64>)>,
    /// Per roles set, the launches (stream, submission, index) of the phase
    /// records that carry it: a row of several sets counts a launch once
    /// however many of its phases it holds.
    pub phased_launches: HashMap<Roles, HashSet<(u32, u64, u32)>>,
    pub unroled_ns: f64,
    pub by_layer: Vec<(String, f64)>,
    /// Per roles set and kernel (a phase timed inside a kernel apart, as
    /// `kernel · phase`): ns, calls, and whether it is such a phase.
    pub by_kernel: HashMap<(Roles, String), (f64, f64, bool)>,
    pub layers: usize,
}

pub(super) fn tally(profile: &Profile) -> Tally {
    let tokens = profile.repetition_tokens();
    let mut by_token: HashMap<u32, Vec<&DispatchRecord>> = HashMap::new();
    for dispatch in &profile.dispatches {
        if let Some(token) = dispatch.token {
            by_token.entry(token).or_default().push(dispatch);
        }
    }
    let mut tally = Tally {
        tokens: 0,
        span_ns: 0.0,
        idle_ns: 0.0,
        by_roles: HashMap::new(),
        phased_launches: HashMap::new(),
        unroled_ns: 0.0,
        by_layer: Vec::new(),
        by_kernel: HashMap::new(),
        layers: 0,
    };
    let mut layer_index: HashMap<String, usize> = HashMap::new();
    let mut layers = HashSet::new();
    for record in profile
        .tokens
        .iter()
        .filter(|token| tokens.contains(&token.index))
    {
        let mut dispatches = by_token.remove(&record.index).unwrap_or_default();
        if dispatches.is_empty() {
            continue;
        }
        tally.tokens += 1;
        dispatches.sort_by_key(|dispatch| (dispatch.start_ns, dispatch.end_ns));
        // The device's token: from its first dispatch's start to its last's end.
        let start = dispatches[0].start_ns;
        let end = dispatches
            .iter()
            .map(|dispatch| dispatch.end_ns)
            .max()
            .unwrap_or(start);
        let span = end.saturating_sub(start) as f64;
        tally.span_ns += span;
        // Each dispatch is charged its exclusive time: from the later of its
        // start and the end of the work before it. Where kernels overlap
        // (launched early, waiting on the one before), the overlap is not
        // charged twice, and the charges add up to the time the device was busy.
        let mut covered_to = start;
        let mut busy = 0.0;
        for dispatch in &dispatches {
            let from = dispatch.start_ns.max(covered_to);
            let ns = dispatch.end_ns.saturating_sub(from) as f64;
            covered_to = covered_to.max(dispatch.end_ns);
            busy += ns;
            let layer = layer_of(&dispatch.scope);
            if layer.starts_with("layer.") {
                layers.insert(layer.clone());
            }
            let slot = *layer_index.entry(layer.clone()).or_insert_with(|| {
                tally.by_layer.push((layer, 0.0));
                tally.by_layer.len() - 1
            });
            tally.by_layer[slot].1 += ns;
            if dispatch.roles.is_empty() {
                tally.unroled_ns += ns;
                continue;
            }
            let entry = tally
                .by_roles
                .entry(dispatch.roles)
                .or_insert((0.0, 0.0, Some(0.0)));
            entry.0 += ns;
            if dispatch.in_kernel.is_some() {
                tally.phased_launches.entry(dispatch.roles).or_default().insert((
                    dispatch.stream,
                    dispatch.submission,
                    dispatch.index,
                ));
            } else {
                entry.1 += 1.0;
            }
            entry.2 = match (entry.2, dispatch.bytes) {
                (Some(sum), bytes) if bytes > 0 => Some(sum + bytes as f64),
                _ => None,
            };
            let kernel = tally
                .by_kernel
                .entry((dispatch.roles, dispatch.kernel_and_phase()))
                .or_insert((0.0, 0.0, dispatch.in_kernel.is_some()));
            kernel.0 += ns;
            kernel.1 += 1.0;
        }
        tally.idle_ns += span - busy;
    }
    tally.layers = layers.len();
    tally
}
