//! CPU reference of mat-mul: weight rows in parallel, each dotted with every
//! input row while it is hot in cache.

use rayon::prelude::*;

use crate::error::Result;
use crate::ops::{WeightElement, dot};
use crate::runtime::KernelArgs;

use super::{K, M, N, OUT, WEIGHT, X};

/// `out` f32 `[m, n]` = `x` f32 `[m, k]` · `weight` `[n, k]`ᵀ.
pub(super) fn matmul<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let weight = args.input::<W>(WEIGHT)?;
    let x = args.input::<f32>(X)?;
    let out = args.output::<f32>(OUT)?;
    let (m, n, k) = (
        args.u32(M)? as usize,
        args.u32(N)? as usize,
        args.u32(K)? as usize,
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
