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

/// The first index of the largest value; NaN never wins, and with no
/// number at all the answer is 0 (as the CUDA kernels answer).
pub(crate) fn first_max_index(values: &[f32]) -> usize {
    let mut best: Option<usize> = None;
    for (index, value) in values.iter().enumerate() {
        if !value.is_nan() && best.is_none_or(|best| *value > values[best]) {
            best = Some(index);
        }
    }
    best.unwrap_or(0)
}
