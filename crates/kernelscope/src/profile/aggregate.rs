//! Grouping dispatch records by a key (op kind, scope, layer, kernel), shared
//! by the report and the comparison so both count the same way.

use std::collections::{BTreeMap, HashMap};

use super::DispatchRecord;

/// Totals of the dispatches that share a key.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Aggregate {
    pub key: String,
    pub calls: u64,
    pub total_ns: u64,
    pub bytes: u64,
    pub flops: u64,
}

impl Aggregate {
    /// Achieved bandwidth in GB/s (bytes per ns), `None` without time or bytes.
    pub fn gigabytes_per_second(&self) -> Option<f64> {
        (self.total_ns > 0 && self.bytes > 0).then(|| self.bytes as f64 / self.total_ns as f64)
    }

    /// Achieved GFLOP/s, `None` without time or flops.
    pub fn gigaflops_per_second(&self) -> Option<f64> {
        (self.total_ns > 0 && self.flops > 0).then(|| self.flops as f64 / self.total_ns as f64)
    }
}

/// The layer a scope belongs to: `layer.3.attn` → `layer.3`; other scopes
/// are their own group; an empty scope is `(unscoped)`.
pub(crate) fn layer_of(scope: &str) -> String {
    if scope.is_empty() {
        return "(unscoped)".to_string();
    }
    let mut parts = scope.splitn(3, '.');
    match (parts.next(), parts.next()) {
        (Some("layer"), Some(number)) => format!("layer.{number}"),
        _ => scope.to_string(),
    }
}

/// The scope of a record, `(unscoped)` when empty.
pub(crate) fn scope_of(record: &DispatchRecord) -> String {
    if record.scope.is_empty() {
        "(unscoped)".to_string()
    } else {
        record.scope.to_string()
    }
}

/// `(key, values)` groups of `items`, keys in first-appearance order and
/// values in item order.
pub(crate) fn group_in_order<T, V>(
    items: impl IntoIterator<Item = T>,
    key: impl Fn(&T) -> &str,
    value: impl Fn(&T) -> V,
) -> Vec<(String, Vec<V>)> {
    let mut groups: Vec<(String, Vec<V>)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for item in items {
        let name = key(&item);
        let slot = match index.get(name) {
            Some(&slot) => slot,
            None => {
                index.insert(name.to_string(), groups.len());
                groups.push((name.to_string(), Vec::new()));
                groups.len() - 1
            }
        };
        groups[slot].1.push(value(&item));
    }
    groups
}

/// Groups `records` by `key`, in first-appearance order.
pub(crate) fn aggregate<'a>(
    records: impl IntoIterator<Item = &'a DispatchRecord>,
    key: impl Fn(&DispatchRecord) -> String,
) -> Vec<Aggregate> {
    let mut order: Vec<Aggregate> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for record in records {
        let name = key(record);
        let slot = *index.entry(name.clone()).or_insert_with(|| {
            order.push(Aggregate {
                key: name,
                ..Aggregate::default()
            });
            order.len() - 1
        });
        // Saturating: a loaded profile's sums were checked to fit in u64
        // (see `Profile::from_json`) and live ones cannot come near it, so
        // this only keeps a forged in-memory profile from wrapping around.
        let entry = &mut order[slot];
        entry.calls = entry.calls.saturating_add(1);
        entry.total_ns = entry.total_ns.saturating_add(record.duration_ns());
        entry.bytes = entry.bytes.saturating_add(record.bytes);
        entry.flops = entry.flops.saturating_add(record.flops);
    }
    order
}

/// The totals of one key over a run's repetitions: `values` for the
/// repetitions it ran in, `absent` more where it did not run (each 0).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Samples {
    /// The totals of the repetitions it ran in (in repetition order).
    pub values: Vec<f64>,
    /// How many repetitions it did not run in.
    pub absent: usize,
}

impl Samples {
    /// Every repetition measured.
    pub fn all(values: Vec<f64>) -> Self {
        Samples { values, absent: 0 }
    }

    /// Their spread, the absent repetitions counted as 0.
    pub fn spread(&self) -> Option<super::Spread> {
        super::Spread::with_zeros(&self.values, self.absent)
    }
}

/// For each key, the total time (ns) it took in each repetition token of
/// `tokens` in which it ran, and how many it did not run in. Records outside
/// those tokens are ignored. With no tokens, the whole run is one
/// repetition. Memory grows with the records, not with keys × tokens.
pub(crate) fn per_repetition_totals(
    records: &[DispatchRecord],
    tokens: &[u32],
    key: impl Fn(&DispatchRecord) -> String,
) -> Vec<(String, Samples)> {
    let repetitions = tokens.len().max(1);
    let position: HashMap<u32, usize> = tokens
        .iter()
        .enumerate()
        .map(|(position, token)| (*token, position))
        .collect();
    let mut order: Vec<(String, BTreeMap<usize, f64>)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for record in records {
        let repetition = if tokens.is_empty() {
            0
        } else {
            match record.token.and_then(|token| position.get(&token)) {
                Some(&position) => position,
                None => continue,
            }
        };
        let name = key(record);
        let slot = *index.entry(name.clone()).or_insert_with(|| {
            order.push((name, BTreeMap::new()));
            order.len() - 1
        });
        *order[slot].1.entry(repetition).or_insert(0.0) += record.duration_ns() as f64;
    }
    order
        .into_iter()
        .map(|(name, by_repetition)| {
            let absent = repetitions - by_repetition.len();
            let values = by_repetition.into_values().collect();
            (name, Samples { values, absent })
        })
        .collect()
}
