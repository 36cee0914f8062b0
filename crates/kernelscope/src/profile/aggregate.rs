//! Grouping dispatch records by a key (op kind, scope, layer, kernel), shared
//! by the comparison here and the renderings (kernelscope-report) so they
//! all count the same way: a launch once, however many phase records a
//! kernel timed inside it has.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::DispatchRecord;

/// Totals of the dispatches that share a key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Aggregate {
    /// The key they share (an op kind's name, a layer, a kernel).
    pub key: String,
    /// How many launches ran in the group: the phases of one launch, timed
    /// inside the kernel, count once where the group holds several of them
    /// (a layer), and a phase's own group counts each launch it ran in.
    pub calls: u64,
    /// Their device time, summed (ns).
    pub total_ns: u64,
    /// The bytes they declare, summed.
    pub bytes: u64,
    /// The flops they declare, summed.
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
pub fn layer_of(scope: &str) -> String {
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
pub fn scope_of(record: &DispatchRecord) -> String {
    if record.scope.is_empty() {
        "(unscoped)".to_string()
    } else {
        record.scope.to_string()
    }
}

/// Values kept per key, keys in the order they first appeared: the one way
/// the report, the comparison, the cross-check and the profiler's tables
/// group records, so they all list groups in the same order. A lookup is
/// a hash probe, so many keys never cost a scan each.
pub(crate) struct FirstSeen<V> {
    groups: Vec<(String, V)>,
    index: HashMap<String, usize>,
}

impl<V> FirstSeen<V> {
    pub fn new() -> Self {
        FirstSeen {
            groups: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// The value of `key`, made by `make` the first time `key` is seen.
    pub fn entry(&mut self, key: &str, make: impl FnOnce() -> V) -> &mut V {
        let slot = match self.index.get(key) {
            Some(&slot) => slot,
            None => {
                self.index.insert(key.to_string(), self.groups.len());
                self.groups.push((key.to_string(), make()));
                self.groups.len() - 1
            }
        };
        &mut self.groups[slot].1
    }

    /// The groups in first-appearance order.
    pub fn into_groups(self) -> Vec<(String, V)> {
        self.groups
    }
}

/// `(key, values)` groups of `items`, keys in first-appearance order and
/// values in item order.
pub(crate) fn group_in_order<T, V>(
    items: impl IntoIterator<Item = T>,
    key: impl Fn(&T) -> &str,
    value: impl Fn(&T) -> V,
) -> Vec<(String, Vec<V>)> {
    let mut groups = FirstSeen::new();
    for item in items {
        groups.entry(key(&item), Vec::new).push(value(&item));
    }
    groups.into_groups()
}

/// Counts the launches among records: each record is one, except that the
/// phases of a kernel timed inside it are one launch between them, however
/// many of them are counted and in whatever order they come.
#[derive(Debug, Default)]
pub(crate) struct Launches {
    /// The launches counted so far.
    pub count: u64,
    /// The launches of phase records seen: by stream, submission and index,
    /// which the phases of one launch share. Empty without such records.
    phased: HashSet<(u32, u64, u32)>,
}

impl Launches {
    /// Counts `record`'s launch, unless one of its phases was counted.
    pub fn add(&mut self, record: &DispatchRecord) {
        let new = record.in_kernel.is_none()
            || self
                .phased
                .insert((record.stream, record.submission, record.index));
        if new {
            self.count = self.count.saturating_add(1);
        }
    }
}

/// Totals of `records` by `key`, in first-appearance order.
pub fn aggregate<'a>(
    records: impl IntoIterator<Item = &'a DispatchRecord>,
    key: impl Fn(&DispatchRecord) -> String,
) -> Vec<Aggregate> {
    let mut groups = FirstSeen::new();
    for record in records {
        let name = key(record);
        // Saturating: a loaded profile's sums were checked to fit in u64
        // (see `Profile::from_json`) and live ones cannot come near it, so
        // this only keeps a forged in-memory profile from wrapping around.
        let (entry, launches) = groups.entry(&name, || {
            let total = Aggregate {
                key: name.clone(),
                ..Aggregate::default()
            };
            (total, Launches::default())
        });
        launches.add(record);
        entry.calls = launches.count;
        entry.total_ns = entry.total_ns.saturating_add(record.duration_ns());
        entry.bytes = entry.bytes.saturating_add(record.bytes);
        entry.flops = entry.flops.saturating_add(record.flops);
    }
    groups
        .into_groups()
        .into_iter()
        .map(|(_, (total, _))| total)
        .collect()
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
    let mut groups: FirstSeen<BTreeMap<usize, f64>> = FirstSeen::new();
    for record in records {
        let repetition = if tokens.is_empty() {
            0
        } else {
            match record.token.and_then(|token| position.get(&token)) {
                Some(&position) => position,
                None => continue,
            }
        };
        *groups
            .entry(&key(record), BTreeMap::new)
            .entry(repetition)
            .or_insert(0.0) += record.duration_ns() as f64;
    }
    groups
        .into_groups()
        .into_iter()
        .map(|(name, by_repetition)| {
            let absent = repetitions - by_repetition.len();
            let values = by_repetition.into_values().collect();
            (name, Samples { values, absent })
        })
        .collect()
}
