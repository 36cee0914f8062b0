//! CPU references of mat-vec and of mat-vec with the residual add: rows in
//! parallel, each a dot in the CPU's widest instructions (`cpu_simd::dot`).

use rayon::prelude::*;

use crate::cpu_simd::dot::PreparedX;
use crate::error::Result;
use crate::ops::WeightElement;
use crate::runtime::KernelArgs;

use super::{K, OUT, WEIGHT, X};

/// Rows per parallel task: enough work per task to amortise scheduling.
const ROWS_PER_TASK: usize = 16;

/// `out` f32 `[n]` = `weight` `[n, k]` · `x` f32 `[k]`.
pub(super) fn matvec<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    each_row::<W>(args, |out, dot| *out = dot)
}

/// `out` f32 `[n]` += `weight` `[n, k]` · `x` f32 `[k]` (the residual
/// variant declares the same argument positions, with `out` read-written).
pub(super) fn matvec_add<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    each_row::<W>(args, |out, dot| *out += dot)
}

/// Calls `store(out[row], weight[row] · x)` for every row, rows in parallel.
fn each_row<W: WeightElement>(args: &KernelArgs<'_>, store: impl Fn(&mut f32, f32) + Sync) -> Result<()> {
    let weight = args.input::<W>(WEIGHT)?;
    let x = args.input::<f32>(X)?;
    let out = args.output::<f32>(OUT)?;
    let k = args.u32(K)? as usize;
    let x = PreparedX::new::<W>(x);
    out.par_chunks_mut(ROWS_PER_TASK)
        .enumerate()
        .for_each(|(task, chunk)| {
            let first_row = task * ROWS_PER_TASK;
            let mut dots = [0.0f32; ROWS_PER_TASK];
            let dots = &mut dots[..chunk.len()];
            x.dot_rows(&weight[first_row * k..(first_row + chunk.len()) * k], k, dots);
            for (value, dot) in chunk.iter_mut().zip(dots) {
                store(value, *dot);
            }
        });
    Ok(())
}
