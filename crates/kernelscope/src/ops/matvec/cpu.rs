//! CPU reference of mat-vec: rows in parallel, each an 8-lane f32 dot.

use rayon::prelude::*;

use crate::error::Result;
use crate::ops::{WeightElement, dot};
use crate::runtime::KernelArgs;

/// Rows per parallel task: enough work per task to amortise scheduling.
const ROWS_PER_TASK: usize = 16;

/// args: weight `[n, k]` (read), x f32 `[k]` (read), out f32 `[n]` (write), n, k.
pub(super) fn matvec<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let weight = args.input::<W>(0)?;
    let x = args.input::<f32>(1)?;
    let out = args.output::<f32>(2)?;
    let k = args.u32(4)? as usize;
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
