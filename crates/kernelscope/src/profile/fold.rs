//! Folding identical layers: a model's layers run the same kernels, so a
//! report of 80 layers is mostly one row repeated. Rows keyed `layer.N` (or
//! `layer.N.suffix`) that do the same work (the same signature, e.g. the
//! same ops and calls) and take the same time within the noise fold into one
//! row per run of consecutive layers, `layer.0–15 ×16`; a layer whose time
//! differs from its group's median by more than the noise stays a row of
//! its own, and so splits the run around it. This is the judgement; how a
//! fold is labeled in a table is the renderings' (kernelscope-report).

use std::collections::{BTreeMap, HashMap};

use super::DispatchRecord;
use super::aggregate::FirstSeen;

/// The smallest relative difference from the median that marks a layer as
/// differing (3 %): layers of one model measured in one run vary by about a
/// percent (kernel-to-kernel jitter, L2 hits), and a report that unfolded
/// for less would unfold everything.
pub const FOLD_TOLERANCE_FLOOR: f64 = 0.03;

/// How many of its own per-token standard deviations a layer may differ from
/// its group's median before it is shown apart.
const SPREADS_OF_NOISE: f64 = 3.0;

/// One row offered for folding, in display order.
#[derive(Clone, Debug, PartialEq)]
pub struct FoldInput {
    /// The row's key (`layer.3`, `layer.3.attn`, `embed`).
    pub key: String,
    /// The value compared across layers (time).
    pub value: f64,
    /// The row's own relative spread over repetitions (standard deviation
    /// over mean), where it was measured more than once.
    pub relative_spread: Option<f64>,
    /// What the row did: rows fold only with rows of the same signature.
    pub signature: String,
}

/// One row of the folded table.
#[derive(Clone, Debug, PartialEq)]
pub struct Folded {
    /// The inputs it stands for, by index, in layer order (one for a row
    /// that did not fold).
    pub members: Vec<usize>,
    /// `layer.0–15 ×16` (or `layer.0–15.attn ×16`) for a fold, the key itself otherwise.
    pub label: String,
    /// The members' relative standard deviation (0 for one row).
    pub relative_spread: f64,
    /// A layer shown apart because it differs from its group by more than
    /// the noise.
    pub outlier: bool,
}

/// `layer.12.attn` → (12, `.attn`); `None` for keys that name no layer.
fn layer_number(key: &str) -> Option<(u32, &str)> {
    let rest = key.strip_prefix("layer.")?;
    let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    if digits == 0 {
        return None;
    }
    let number = rest[..digits].parse().ok()?;
    Some((number, &rest[digits..]))
}

fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    })
}

/// Relative tolerance of a group: the floor, or a multiple of its rows'
/// median per-token spread where that is larger.
fn tolerance(rows: &[&FoldInput]) -> f64 {
    let mut spreads: Vec<f64> = rows
        .iter()
        .filter_map(|row| row.relative_spread)
        .filter(|spread| spread.is_finite())
        .collect();
    let noise = median(&mut spreads).map_or(0.0, |spread| SPREADS_OF_NOISE * spread);
    noise.max(FOLD_TOLERANCE_FLOOR)
}

/// Which rows differ from the median of their group (same suffix, same
/// signature) by more than the group's tolerance.
pub fn outliers(rows: &[FoldInput]) -> Vec<bool> {
    let mut groups: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
    for (index, row) in rows.iter().enumerate() {
        if let Some((_, suffix)) = layer_number(&row.key) {
            groups.entry((suffix, &row.signature)).or_default().push(index);
        }
    }
    let mut outlier = vec![false; rows.len()];
    for members in groups.values() {
        // Two rows have no majority to differ from: they fold or not by
        // their difference alone (see `fold`).
        if members.len() < 3 {
            continue;
        }
        let group: Vec<&FoldInput> = members.iter().map(|&index| &rows[index]).collect();
        let mut values: Vec<f64> = group.iter().map(|row| row.value).collect();
        let Some(middle) = median(&mut values) else {
            continue;
        };
        let allowed = tolerance(&group) * middle.abs();
        for &index in members {
            outlier[index] = (rows[index].value - middle).abs() > allowed;
        }
    }
    outlier
}

/// Folds runs of consecutive layers of one group (same suffix and
/// signature, none an outlier) into one row each, placed where the run's
/// first layer was; every other row stays as it was, in order.
pub fn fold(rows: &[FoldInput]) -> Vec<Folded> {
    let outlier = outliers(rows);
    let single = |index: usize| Folded {
        members: vec![index],
        label: rows[index].key.clone(),
        relative_spread: 0.0,
        outlier: outlier[index],
    };
    // Each foldable layer row's group, and the rows of each group by layer.
    let mut by_group: HashMap<(&str, &str), Vec<(u32, usize)>> = HashMap::new();
    for (index, row) in rows.iter().enumerate() {
        if outlier[index] {
            continue;
        }
        if let Some((number, suffix)) = layer_number(&row.key) {
            by_group
                .entry((suffix, &row.signature))
                .or_default()
                .push((number, index));
        }
    }
    // Runs of consecutive layer numbers, split where two neighbours differ
    // by more than the tolerance (what decides a group of two).
    let mut run_of: HashMap<usize, usize> = HashMap::new();
    let mut runs: Vec<Vec<usize>> = Vec::new();
    for members in by_group.values_mut() {
        members.sort_unstable();
        let group: Vec<&FoldInput> = members.iter().map(|&(_, index)| &rows[index]).collect();
        let allowed = tolerance(&group);
        let mut current: Vec<usize> = Vec::new();
        let mut previous: Option<u32> = None;
        for &(number, index) in members.iter() {
            let continues = previous.is_some_and(|previous| number == previous + 1)
                && current.last().is_some_and(|&last| {
                    let (a, b) = (rows[last].value, rows[index].value);
                    (a - b).abs() <= allowed * a.abs().max(b.abs())
                });
            if !continues && !current.is_empty() {
                runs.push(std::mem::take(&mut current));
            }
            current.push(index);
            previous = Some(number);
        }
        if !current.is_empty() {
            runs.push(current);
        }
    }
    for (run, members) in runs.iter().enumerate() {
        if members.len() > 1 {
            for &index in members {
                run_of.insert(index, run);
            }
        }
    }
    let mut folded = Vec::new();
    for index in 0..rows.len() {
        let Some(&run) = run_of.get(&index) else {
            folded.push(single(index));
            continue;
        };
        let members = &runs[run];
        // A fold is shown where the first of its rows was; its other rows
        // are in it.
        if members.iter().min() != Some(&index) {
            continue;
        }
        folded.push(fold_row(rows, members));
    }
    folded
}

fn fold_row(rows: &[FoldInput], members: &[usize]) -> Folded {
    let values: Vec<f64> = members.iter().map(|&index| rows[index].value).collect();
    let count = values.len() as f64;
    let mean = values.iter().sum::<f64>() / count;
    let variance = values.iter().map(|value| (value - mean).powi(2)).sum::<f64>() / count;
    let relative_spread = if mean != 0.0 {
        variance.sqrt() / mean.abs()
    } else {
        0.0
    };
    let (first, suffix) = layer_number(&rows[members[0]].key).unwrap_or((0, ""));
    let last = layer_number(&rows[members[members.len() - 1]].key).map_or(first, |(number, _)| number);
    Folded {
        members: members.to_vec(),
        label: format!("layer.{first}–{last}{suffix} ×{}", members.len()),
        relative_spread,
        outlier: false,
    }
}

/// What a group of records did and took, for [`fold_inputs`].
#[derive(Default)]
struct Work {
    calls_by_kernel: BTreeMap<String, u64>,
    bytes: u64,
    flops: u64,
    total_ns: f64,
    by_token: BTreeMap<Option<u32>, f64>,
}

/// The rows the records make when grouped by `key` (in first-seen order),
/// each with its time, its per-token spread and its signature (the kernels
/// it ran, how often, and the bytes and flops they declared).
pub fn fold_inputs<'a>(
    records: impl IntoIterator<Item = &'a DispatchRecord>,
    key: impl Fn(&DispatchRecord) -> String,
) -> Vec<FoldInput> {
    let mut groups: FirstSeen<Work> = FirstSeen::new();
    for record in records {
        let work = groups.entry(&key(record), Work::default);
        // A kernel timed inside has a record per phase: each phase its own
        // entry, so a launch is never counted as several calls of one kernel.
        *work.calls_by_kernel.entry(record.kernel_and_phase()).or_insert(0) += 1;
        work.bytes = work.bytes.saturating_add(record.bytes);
        work.flops = work.flops.saturating_add(record.flops);
        let duration = record.duration_ns() as f64;
        work.total_ns += duration;
        *work.by_token.entry(record.token).or_insert(0.0) += duration;
    }
    groups
        .into_groups()
        .into_iter()
        .map(|(key, work)| {
            let per_token: Vec<f64> = work.by_token.values().copied().collect();
            let relative_spread = super::Spread::of(&per_token)
                .filter(|spread| spread.count > 1 && spread.mean > 0.0)
                .map(|spread| spread.stddev / spread.mean);
            let kernels: Vec<String> = work
                .calls_by_kernel
                .iter()
                .map(|(kernel, calls)| format!("{kernel}×{calls}"))
                .collect();
            FoldInput {
                key,
                value: work.total_ns,
                relative_spread,
                signature: format!("{} | {} B | {} FLOP", kernels.join(" "), work.bytes, work.flops),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(values: &[f64]) -> Vec<FoldInput> {
        values
            .iter()
            .enumerate()
            .map(|(layer, value)| FoldInput {
                key: format!("layer.{layer}"),
                value: *value,
                relative_spread: Some(0.002),
                signature: "same".into(),
            })
            .collect()
    }

    #[test]
    fn layer_numbers_are_read_from_keys() {
        assert_eq!(layer_number("layer.12.attn"), Some((12, ".attn")));
        assert_eq!(layer_number("layer.3"), Some((3, "")));
        assert_eq!(layer_number("layer."), None);
        assert_eq!(layer_number("embed"), None);
        assert_eq!(layer_number("layer.x"), None);
    }

    #[test]
    fn runs_split_where_layer_numbers_skip() {
        let mut input = rows(&[10.0, 10.1, 10.0, 10.05]);
        input[2].key = "layer.7".into();
        input[3].key = "layer.8".into();
        let folded = fold(&input);
        let labels: Vec<&str> = folded.iter().map(|row| row.label.as_str()).collect();
        assert_eq!(labels, ["layer.0–1 ×2", "layer.7–8 ×2"]);
    }

    #[test]
    fn different_signatures_never_fold_together() {
        let mut input = rows(&[10.0, 10.0, 10.0, 10.0]);
        input[2].signature = "other".into();
        let labels: Vec<String> = fold(&input).into_iter().map(|row| row.label).collect();
        assert_eq!(labels, ["layer.0–1 ×2", "layer.2", "layer.3"]);
    }

    #[test]
    fn a_noisy_group_tolerates_more() {
        // 6 % apart: outliers at 0.2 % spread, not at a 3 % spread.
        let quiet = rows(&[100.0, 100.0, 106.0, 100.0]);
        assert_eq!(outliers(&quiet), [false, false, true, false]);
        let mut noisy = quiet.clone();
        noisy.iter_mut().for_each(|row| row.relative_spread = Some(0.03));
        assert_eq!(outliers(&noisy), [false; 4]);
        assert_eq!(fold(&noisy).len(), 1);
    }
}
