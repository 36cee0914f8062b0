//! CPU references of the grouping kernels.

use rayon::prelude::*;

use crate::error::Result;
use crate::ops::WeightElement;
use crate::runtime::KernelArgs;

/// `out[p] = x[order[p]]`, rows of `width`.
pub(super) fn moe_gather<T: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    use super::arguments::gather::{ORDER, OUT, WIDTH, X};
    let width = args.u32(WIDTH)? as usize;
    let (x, order) = (args.input::<T>(X)?, args.input::<u32>(ORDER)?);
    args.output::<T>(OUT)?
        .par_chunks_mut(width.max(1))
        .zip(order)
        .for_each(|(out, &row)| {
            let row = row as usize;
            out.copy_from_slice(&x[row * width..(row + 1) * width]);
        });
    Ok(())
}

/// `out[p] = x[order[p]]` rounded to bf16 (nearest even), rows of `width`.
pub(super) fn moe_gather_narrow(args: &KernelArgs<'_>) -> Result<()> {
    use super::arguments::gather::{ORDER, OUT, WIDTH, X};
    let width = args.u32(WIDTH)? as usize;
    let (x, order) = (args.input::<f32>(X)?, args.input::<u32>(ORDER)?);
    args.output::<half::bf16>(OUT)?
        .par_chunks_mut(width.max(1))
        .zip(order)
        .for_each(|(out, &row)| {
            let row = row as usize;
            for (out, &value) in out.iter_mut().zip(&x[row * width..(row + 1) * width]) {
                *out = half::bf16::from_f32(value);
            }
        });
    Ok(())
}

/// `hidden[row] += Σ_j weights[row, j] · expert_out[position[row, j]]`, in order of j.
pub(super) fn moe_combine(args: &KernelArgs<'_>) -> Result<()> {
    use super::arguments::combine::{EXPERT_OUT, HIDDEN, K, POSITION, WEIGHTS, WIDTH};
    let (width, k) = (args.u32(WIDTH)? as usize, (args.u32(K)? as usize).max(1));
    let expert_out = args.input::<f32>(EXPERT_OUT)?;
    let (position, weights) = (args.input::<u32>(POSITION)?, args.input::<f32>(WEIGHTS)?);
    args.output::<f32>(HIDDEN)?
        .par_chunks_mut(width.max(1))
        .enumerate()
        .for_each(|(row, hidden)| {
            for (r, value) in hidden.iter_mut().enumerate() {
                let mut total = 0.0f32;
                for j in 0..k {
                    let p = position[row * k + j] as usize;
                    total += weights[row * k + j] * expert_out[p * width + r];
                }
                *value += total;
            }
        });
    Ok(())
}
