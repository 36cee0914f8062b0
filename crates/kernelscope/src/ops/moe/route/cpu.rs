//! CPU reference of the mixture-of-experts router: per row, the softmax
//! over every expert in f32, the k largest (ties to the lower index), their
//! probabilities, renormalised to sum to 1 where asked.

use crate::error::Result;
use crate::runtime::KernelArgs;

use super::{COUNTS, EXPERTS, IDS, K, LOGITS, RENORMALIZE, WEIGHTS};

/// Routes every row of `logits` `[rows, experts]` into `ids` and `weights`
/// `[rows, k]`, tallying each choice in `counts` `[experts]`.
pub(super) fn moe_route(args: &KernelArgs<'_>) -> Result<()> {
    let logits = args.input::<f32>(LOGITS)?;
    let ids = args.output::<u32>(IDS)?;
    let weights = args.output::<f32>(WEIGHTS)?;
    let counts = args.output::<u32>(COUNTS)?;
    let experts = (args.u32(EXPERTS)? as usize).max(1);
    let k = (args.u32(K)? as usize).max(1);
    let renormalize = args.u32(RENORMALIZE)? != 0;
    for ((row, row_ids), row_weights) in logits
        .chunks_exact(experts)
        .zip(ids.chunks_exact_mut(k))
        .zip(weights.chunks_exact_mut(k))
    {
        let (chosen, probabilities) = route(row, k);
        let kept: f32 = probabilities.iter().sum();
        for (slot, (id, probability)) in chosen.iter().zip(&probabilities).enumerate() {
            row_ids[slot] = *id as u32;
            counts[*id] += 1;
            row_weights[slot] = if renormalize {
                probability / kept
            } else {
                *probability
            };
        }
    }
    Ok(())
}

/// The `k` experts of the largest logits of one row (ties to the lower
/// index), largest first, and each one's softmax probability over the row.
pub(crate) fn route(row: &[f32], k: usize) -> (Vec<usize>, Vec<f32>) {
    let largest = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let total: f32 = row.iter().map(|value| (value - largest).exp()).sum();
    let mut order: Vec<usize> = (0..row.len()).collect();
    // Stable: equal logits keep the lower index first.
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
    order.truncate(k);
    let probabilities = order.iter().map(|&e| (row[e] - largest).exp() / total).collect();
    (order, probabilities)
}
