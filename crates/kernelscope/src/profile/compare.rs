//! Comparing two profiles: counters exactly, timings against a relative
//! threshold that must also exceed the noise of the repetitions (tokens, or
//! submissions of one label) each profile carries. Profiles taken under
//! different conditions are refused unless forced. The device's measured
//! peaks are not such a condition: they describe the machine's state at the
//! time (clocks, temperature, a neighbour's load), not the code, so they
//! never refuse a comparison; a large change is noted, since it may explain
//! timings that moved. The verdicts are made here; kernelscope-report
//! renders them.

use std::collections::{HashMap, HashSet};

use super::aggregate::{Samples, group_in_order, layer_of, per_repetition_totals};
use super::{Phase, Profile};
use crate::error::{Error, Result};

/// What a comparison row concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Equal (counters) or within threshold and noise (timings).
    Same,
    /// Better beyond threshold and noise.
    Improved,
    /// Worse beyond threshold and noise: fails the comparison.
    Regressed,
    /// Only in the new profile.
    Added,
    /// Only in the base profile.
    Removed,
}

impl Verdict {
    /// The report's word for it (`same`, `improved`, `REGRESSED`, `new`, `gone`).
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Same => "same",
            Verdict::Improved => "improved",
            Verdict::Regressed => "REGRESSED",
            Verdict::Added => "new",
            Verdict::Removed => "gone",
        }
    }
}

/// One compared quantity.
#[derive(Clone, Debug, PartialEq)]
pub struct ComparisonRow {
    /// `counter`, `token`, `op`, `layer`, `kernel`, `phase` (a kernel's
    /// phases timed inside it), `submission` or `rank` (a split run's
    /// ranks' steps).
    pub section: &'static str,
    /// What is compared (counter name, op kind, layer, label).
    pub key: String,
    /// Base value (counts, or mean ns per repetition).
    pub base: Option<f64>,
    /// New value.
    pub new: Option<f64>,
    /// Relative change `(new - base) / base`.
    pub change: Option<f64>,
    /// Twice the standard error of the difference, in the values' unit
    /// (0 for counters and single repetitions).
    pub noise: f64,
    /// The conclusion.
    pub verdict: Verdict,
}

/// The result of [`compare`].
#[derive(Clone, Debug)]
pub struct Comparison {
    /// Every compared quantity.
    pub rows: Vec<ComparisonRow>,
    /// Things the reader should know (forced conditions, missing timings).
    pub notes: Vec<String>,
    /// The threshold used.
    pub threshold: f64,
}

impl Comparison {
    /// Whether any row regressed.
    pub fn regressed(&self) -> bool {
        self.regressions() > 0
    }

    /// How many rows regressed.
    pub fn regressions(&self) -> usize {
        self.rows
            .iter()
            .filter(|row| row.verdict == Verdict::Regressed)
            .count()
    }
}

/// Refuses a profile (the `side` of a comparison) in which no token,
/// submission or dispatch took any time: compared, it would read as
/// "no regression" whatever the other held.
pub fn require_timed_work(side: &'static str, profile: &Profile) -> Result<()> {
    let timed = profile.tokens.iter().any(|token| token.duration_ns() > 0)
        || profile
            .submissions
            .iter()
            .any(|submission| submission.duration_ns() > 0)
        || profile
            .dispatches
            .iter()
            .any(|dispatch| dispatch.duration_ns() > 0);
    if timed {
        return Ok(());
    }
    Err(Error::NothingTimed {
        side,
        tokens: profile.tokens.len(),
        submissions: profile.submissions.len(),
        dispatches: profile
            .dispatches
            .iter()
            .filter(|dispatch| dispatch.is_launch())
            .count(),
    })
}

/// Compares `new` against `base`. `threshold` is relative (0.05 = 5%).
/// Refuses profiles taken under different conditions unless `force`.
pub fn compare(base: &Profile, new: &Profile, threshold: f64, force: bool) -> Result<Comparison> {
    require_timed_work("base", base)?;
    require_timed_work("new", new)?;
    let differences = base.conditions.differences(&new.conditions);
    let mut notes = Vec::new();
    if !differences.is_empty() {
        if !force {
            return Err(Error::ConditionsDiffer {
                differences: differences.join(", "),
            });
        }
        notes.push(format!(
            "compared despite different conditions: {}",
            differences.join(", ")
        ));
    }
    notes.extend(peak_changes(&base.conditions, &new.conditions));
    notes.extend(super::experts::routing_changes(
        base.experts.as_ref(),
        new.experts.as_ref(),
    ));
    let mut rows = compare_counters(base, new, &mut notes);
    rows.extend(compare_timings(
        "token",
        &token_times(base),
        &token_times(new),
        threshold,
    ));
    let base_tokens = base.repetition_tokens();
    let new_tokens = new.repetition_tokens();
    if base.dispatches.is_empty() || new.dispatches.is_empty() {
        notes.push("per-op and per-layer timings not compared: a profile has no dispatch times".into());
    } else {
        // A program profiled from outside has kernels of its own names:
        // they are compared one by one, and its NVTX scopes as layers.
        let foreign = base.conditions.program.is_some() || new.conditions.program.is_some();
        let mut keys = vec![("op", KeyKind::Op), ("layer", KeyKind::Layer)];
        if foreign {
            // Engines name their layers differently (`layer.3`, `layers.3`,
            // `model.layers.3.mlp`, `blk.3`): numbered layers meet by number.
            keys[1].1 = KeyKind::NumberedLayer;
            keys.push(("kernel", KeyKind::Kernel));
        }
        // Kernels timed inside by phase: each phase compared on its own,
        // which its op and layer rows would mix with other work.
        let phased = |profile: &Profile| profile.dispatches.iter().any(|record| record.in_kernel.is_some());
        if phased(base) || phased(new) {
            keys.push(("phase", KeyKind::Phase));
        }
        for (section, key) in keys {
            let totals = |profile: &Profile, tokens: &[u32]| match key {
                KeyKind::Phase => {
                    let phases: Vec<_> = profile
                        .dispatches
                        .iter()
                        .filter(|record| record.in_kernel.is_some())
                        .cloned()
                        .collect();
                    per_repetition_totals(&phases, tokens, |record| key.of(record))
                }
                _ => per_repetition_totals(&profile.dispatches, tokens, |record| key.of(record)),
            };
            rows.extend(compare_timings(
                section,
                &totals(base, &base_tokens),
                &totals(new, &new_tokens),
                threshold,
            ));
        }
    }
    rows.extend(compare_timings(
        "submission",
        &submission_times(base),
        &submission_times(new),
        threshold,
    ));
    // Split runs: each rank's steps and their imbalance.
    rows.extend(compare_timings(
        "rank",
        &super::rank_steps::rank_samples(base),
        &super::rank_steps::rank_samples(new),
        threshold,
    ));
    Ok(Comparison {
        rows,
        notes,
        threshold,
    })
}

/// The relative change in a measured peak beyond which [`compare`] notes
/// it: the probes repeat within a few percent on an idle device.
const PEAK_CHANGE_NOTED: f64 = 0.10;

/// A note for each ceiling both profiles measured that changed by more
/// than [`PEAK_CHANGE_NOTED`], and one where their rooflines are drawn at
/// different bandwidths (a profile from before schema 3 has only a copy
/// ceiling): their shares of peak then do not compare, though the times do.
fn peak_changes(base: &super::Conditions, new: &super::Conditions) -> Vec<String> {
    let mut notes: Vec<String> = base
        .ceilings
        .each()
        .filter_map(|(name, unit, base_ceiling)| {
            let (_, _, new_ceiling) = new.ceilings.each().find(|(other, _, _)| *other == name)?;
            let (base, new) = (base_ceiling.value, new_ceiling.value);
            let change = (new - base) / base;
            (change.abs() > PEAK_CHANGE_NOTED).then(|| {
                format!(
                    "{} ceiling measured {base:.1} {unit} for the base and {new:.1} {unit} for the new profile ({:+.1}%): the device itself ran differently, which timings may reflect",
                    name.replace('_', " "),
                    change * 100.0
                )
            })
        })
        .collect();
    if let (Some((_, base_basis)), Some((_, new_basis))) =
        (base.ceilings.bandwidth(), new.ceilings.bandwidth())
        && base_basis != new_basis
    {
        notes.push(format!(
            "the base profile's roofline is drawn at its {} ceiling and the new one's at its {} ceiling (profiles before schema 3 measured only a copy): their shares of peak bandwidth do not compare, their times do",
            base_basis.name(),
            new_basis.name()
        ));
    }
    notes
}

#[derive(Clone, Copy)]
enum KeyKind {
    Op,
    Layer,
    /// The layer, `layer.N` wherever the scope names a numbered layer.
    NumberedLayer,
    Kernel,
    /// A kernel's phase, timed inside it (`kernel · phase`).
    Phase,
}

impl KeyKind {
    fn of(self, record: &super::DispatchRecord) -> String {
        match self {
            KeyKind::Op => record.op_kind.name().to_string(),
            KeyKind::Layer => layer_of(&record.scope),
            KeyKind::NumberedLayer => {
                numbered_layer_of(&record.scope).unwrap_or_else(|| layer_of(&record.scope))
            }
            KeyKind::Kernel | KeyKind::Phase => record.kernel_and_phase(),
        }
    }
}

/// Words engines put before a layer's number in their scopes: kscope's
/// `layer`, transformers' module path `layers`, llama.cpp's `blk`, GPT-2's `h`.
const LAYER_WORDS: [&str; 5] = ["layer", "layers", "blk", "block", "h"];

/// `layer.N` for a scope naming a numbered layer (`layers.3`,
/// `model.layers.3.self_attn`, `blk.3/attn`), `None` for any other.
fn numbered_layer_of(scope: &str) -> Option<String> {
    let parts: Vec<&str> = scope.split(['.', '/', ':']).collect();
    parts.windows(2).find_map(|pair| {
        let number: u32 = pair[1].parse().ok()?;
        LAYER_WORDS
            .contains(&pair[0].to_ascii_lowercase().as_str())
            .then(|| format!("layer.{number}"))
    })
}

/// Host time of each repetition token, under one key.
fn token_times(profile: &Profile) -> Vec<(String, Samples)> {
    // A set: a token list as long as the profile must not cost a scan per token.
    let tokens: HashSet<u32> = profile.repetition_tokens().into_iter().collect();
    if tokens.is_empty() {
        return Vec::new();
    }
    let times = profile
        .tokens
        .iter()
        .filter(|token| tokens.contains(&token.index))
        .map(|token| token.duration_ns() as f64)
        .collect();
    vec![("time per token".to_string(), Samples::all(times))]
}

/// Durations of each label's submissions.
fn submission_times(profile: &Profile) -> Vec<(String, Samples)> {
    group_in_order(
        &profile.submissions,
        |record| &record.label,
        |record| record.duration_ns() as f64,
    )
    .into_iter()
    .map(|(label, times)| (label, Samples::all(times)))
    .collect()
}

fn compare_timings(
    section: &'static str,
    base: &[(String, Samples)],
    new: &[(String, Samples)],
    threshold: f64,
) -> Vec<ComparisonRow> {
    let new_by_key: HashMap<&str, &Samples> =
        new.iter().map(|(key, samples)| (key.as_str(), samples)).collect();
    let mut rows = Vec::new();
    for (key, base_samples) in base {
        let base_spread = base_samples.spread();
        let new_spread = new_by_key.get(key.as_str()).and_then(|samples| samples.spread());
        let row = match (base_spread, new_spread) {
            (Some(b), Some(n)) => {
                let noise = 2.0 * (b.standard_error().powi(2) + n.standard_error().powi(2)).sqrt();
                let difference = n.mean - b.mean;
                let change = (b.mean > 0.0).then(|| difference / b.mean);
                let beyond = |c: f64| c > threshold && difference.abs() > noise;
                let verdict = match change {
                    Some(c) if beyond(c) => Verdict::Regressed,
                    Some(c) if beyond(-c) => Verdict::Improved,
                    _ => Verdict::Same,
                };
                ComparisonRow {
                    section,
                    key: key.clone(),
                    base: Some(b.mean),
                    new: Some(n.mean),
                    change,
                    noise,
                    verdict,
                }
            }
            (b, _) => ComparisonRow {
                section,
                key: key.clone(),
                base: b.map(|b| b.mean),
                new: None,
                change: None,
                noise: 0.0,
                verdict: Verdict::Removed,
            },
        };
        rows.push(row);
    }
    let base_keys: HashSet<&str> = base.iter().map(|(key, _)| key.as_str()).collect();
    for (key, samples) in new {
        if !base_keys.contains(key.as_str()) {
            rows.push(ComparisonRow {
                section,
                key: key.clone(),
                base: None,
                new: samples.spread().map(|s| s.mean),
                change: None,
                noise: 0.0,
                verdict: Verdict::Added,
            });
        }
    }
    rows
}

/// Counters per decode token when both profiles have decode tokens (the
/// work per token is what a change affects), run totals otherwise. Compared
/// exactly: any increase regresses, except `concurrent`, which is judged by
/// its share of the dispatches (a larger share is better): fusing kernels
/// lowers both counts, and fewer independent dispatches among fewer
/// dispatches is no loss of concurrency.
fn compare_counters(base: &Profile, new: &Profile, notes: &mut Vec<String>) -> Vec<ComparisonRow> {
    let per_token = |profile: &Profile| {
        profile
            .phase_counters(Phase::Decode)
            .map(|(count, sum)| (count as u64, sum))
    };
    let ((base_count, base_sum), (new_count, new_sum)) = match (per_token(base), per_token(new)) {
        (Some(b), Some(n)) => (b, n),
        _ => {
            notes.push("counters compared as run totals: a profile has no decode tokens".into());
            ((1, base.counters), (1, new.counters))
        }
    };
    base_sum
        .entries()
        .into_iter()
        .zip(new_sum.entries())
        .map(|((name, base_total), (_, new_total))| {
            let more_is_better = name == "concurrent";
            // Exact: compare base_total / base_denominator with new_total /
            // new_denominator, in integers.
            let (base_denominator, new_denominator) = if more_is_better {
                (base_sum.dispatches, new_sum.dispatches)
            } else {
                (base_count, new_count)
            };
            let lhs = u128::from(new_total) * u128::from(base_denominator);
            let rhs = u128::from(base_total) * u128::from(new_denominator);
            let verdict = match lhs.cmp(&rhs) {
                std::cmp::Ordering::Equal => Verdict::Same,
                std::cmp::Ordering::Greater if more_is_better => Verdict::Improved,
                std::cmp::Ordering::Less if !more_is_better => Verdict::Improved,
                _ => Verdict::Regressed,
            };
            let base_value = base_total as f64 / base_count as f64;
            let new_value = new_total as f64 / new_count as f64;
            ComparisonRow {
                section: "counter",
                key: name.to_string(),
                base: Some(base_value),
                new: Some(new_value),
                change: (base_value > 0.0).then(|| (new_value - base_value) / base_value),
                noise: 0.0,
                verdict,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::numbered_layer_of;

    #[test]
    fn numbered_layers_of_every_engine_meet_by_number() {
        for (scope, layer) in [
            ("layer.3", Some("layer.3")),
            ("layer.3.attn", Some("layer.3")),
            ("layers.12", Some("layer.12")),
            ("model.layers.7.self_attn", Some("layer.7")),
            ("blk.0/attn_q", Some("layer.0")),
            ("transformer.h.11.mlp", Some("layer.11")),
            ("lm_head", None),
            ("layers", None),
            ("layers.x", None),
            ("relayer.4", None),
            ("", None),
        ] {
            assert_eq!(numbered_layer_of(scope).as_deref(), layer, "{scope}");
        }
    }
}
