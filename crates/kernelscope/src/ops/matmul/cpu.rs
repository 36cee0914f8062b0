//! CPU reference of mat-mul: weight rows in parallel, each dotted with every
//! input row while it is hot in cache.

use rayon::prelude::*;

use crate::error::Result;
use crate::ops::{WeightElement, dot};
use crate::runtime::KernelArgs;

/// args: weight `[n, k]` (read), x f32 `[m, k]` (read), out f32 `[m, n]` (write), m, n, k.
pub(super) fn matmul<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let weight = args.input::<W>(0)?;
    let x = args.input::<f32>(1)?;
    let out = args.output::<f32>(2)?;
    let (m, n, k) = (
        args.u32(3)? as usize,
        args.u32(4)? as usize,
        args.u32(5)? as usize,
    );
    // Computed column-block by column-block into a transposed scratch so the
    // parallel split owns disjoint memory, then scattered into [m, n].
    let mut transposed = vec![0f32; n * m];
    transposed
        .par_chunks_mut(m.max(1))
        .enumerate()
        .for_each(|(row, column)| {
            let weights = &weight[row * k..(row + 1) * k];
            for (token, value) in column.iter_mut().enumerate() {
                *value = dot(weights, &x[token * k..(token + 1) * k]);
            }
        });
    for row in 0..n {
        for token in 0..m {
            out[token * n + row] = transposed[row * m + token];
        }
    }
    Ok(())
}
