//! CPU reference of mat-vec: rows in parallel, each an 8-lane f32 dot.

use rayon::prelude::*;

use crate::error::Result;
use crate::ops::{WeightElement, dot};
use crate::runtime::KernelArgs;

use super::{K, OUT, WEIGHT, X};

/// Rows per parallel task: enough work per task to amortise scheduling.
const ROWS_PER_TASK: usize = 16;

/// `out` f32 `[n]` = `weight` `[n, k]` · `x` f32 `[k]`.
pub(super) fn matvec<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let weight = args.input::<W>(WEIGHT)?;
    let x = args.input::<f32>(X)?;
    let out = args.output::<f32>(OUT)?;
    let k = args.u32(K)? as usize;
    out.par_chunks_mut(ROWS_PER_TASK)
        .enumerate()
        .for_each(|(task, chunk)| {
            let first_row = task * ROWS_PER_TASK;
            for (offset, value) in chunk.iter_mut().enumerate() {
                let row = first_row + offset;
                *value = dot(&weight[row * k..(row + 1) * k], x);
            }
        });
    Ok(())
}
