//! CPU reference of argmax (first index of the maximum; NaN never wins).

use crate::error::Result;
use crate::runtime::KernelArgs;

use super::{LOGITS, OUT};

/// `out[0]` (u32) is the index of the largest of the f32 `logits`.
pub(super) fn argmax(args: &KernelArgs<'_>) -> Result<()> {
    let logits = args.input::<f32>(LOGITS)?;
    let out = args.output::<u32>(OUT)?;
    out[0] = first_max_index(logits) as u32;
    Ok(())
}

/// The first index of the largest value.
pub(crate) fn first_max_index(values: &[f32]) -> usize {
    let mut best = 0;
    for (index, value) in values.iter().enumerate() {
        if *value > values[best] || values[best].is_nan() {
            best = index;
        }
    }
    best
}
