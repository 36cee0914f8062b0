//! Grouping dispatch records by a key (op kind, scope, layer, kernel), shared
//! by the report and the comparison so both count the same way.

use std::collections::HashMap;

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
        let entry = &mut order[slot];
        entry.calls += 1;
        entry.total_ns += record.duration_ns();
        entry.bytes += record.bytes;
        entry.flops += record.flops;
    }
    order
}

/// For each key, the total time (ns) it took in each repetition token of
/// `tokens`, in the order of `tokens` (0 where it did not run). Records
/// outside those tokens are ignored. With no tokens, the whole run is one
/// repetition.
pub(crate) fn per_repetition_totals(
    records: &[DispatchRecord],
    tokens: &[u32],
    key: impl Fn(&DispatchRecord) -> String,
) -> Vec<(String, Vec<f64>)> {
    let repetitions = tokens.len().max(1);
    let position: HashMap<u32, usize> = tokens
        .iter()
        .enumerate()
        .map(|(position, token)| (*token, position))
        .collect();
    let mut order: Vec<(String, Vec<f64>)> = Vec::new();
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
            order.push((name, vec![0.0; repetitions]));
            order.len() - 1
        });
        order[slot].1[repetition] += record.duration_ns() as f64;
    }
    order
}
