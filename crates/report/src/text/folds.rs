//! How folded rows are labeled in the text report: kernelscope judges which
//! layers fold and which differ; here a fold's members show as
//! `layer.0–15 ×16 ±1.2%` and a layer that differs as `layer.7 *`.

use std::collections::HashMap;

use kernelscope::profile::{FoldInput, fold};

/// What marks a row that differs from the layers doing the same work.
pub(super) const DIFFERS_MARK: &str = " *";

/// The label each row of `rows` shows under; rows that neither fold nor
/// differ are left out.
pub(super) fn fold_labels(rows: &[FoldInput]) -> HashMap<String, String> {
    let mut labels = HashMap::new();
    for folded in fold(rows) {
        let label = if folded.members.len() > 1 {
            format!("{} ±{:.1}%", folded.label, 100.0 * folded.relative_spread)
        } else if folded.outlier {
            format!("{}{DIFFERS_MARK}", folded.label)
        } else {
            continue;
        };
        for index in folded.members {
            labels.insert(rows[index].key.clone(), label.clone());
        }
    }
    labels
}

/// The row `key` shows under: its fold's label, or itself.
pub(super) fn shown_as(labels: &HashMap<String, String>, key: String) -> String {
    labels.get(&key).cloned().unwrap_or(key)
}
