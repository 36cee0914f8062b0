//! CPU references of the fused ops: the composition of the RMSNorm and
//! mat-vec references (the same arithmetic, in the same order), so the
//! fused CUDA kernels are tested against exactly what the unfused path does.

use rayon::prelude::*;

use crate::cpu_simd::dot::PreparedX;
use crate::error::Result;
use crate::ops::WeightElement;
use crate::ops::rms_norm::cpu::scale_of;
use crate::runtime::KernelArgs;

/// Rows per parallel task: enough work per task to amortise scheduling.
const ROWS_PER_TASK: usize = 16;

/// `rmsnorm(x) * norm_weight` as the RMSNorm op computes it, in f32.
fn normed<W: WeightElement>(x: &[f32], norm_weight: &[W], eps: f32) -> Vec<f32> {
    let scale = scale_of(x, eps);
    x.iter()
        .zip(norm_weight)
        .map(|(v, w)| v * scale * w.to_f32())
        .collect()
}

/// `out` = `[weight_a; weight_b; weight_c]` (`rows_a + rows_b + rows_c` rows
/// of `k`) · `rmsnorm(x) * norm_weight`.
pub(super) fn norm_matvec<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    use super::{EPS, K, NORM_WEIGHT, OUT, ROWS_A, ROWS_B, ROWS_C, WEIGHT_A, WEIGHT_B, WEIGHT_C, X};
    let k = args.u32(K)? as usize;
    let h = normed(
        args.input::<f32>(X)?,
        args.input::<W>(NORM_WEIGHT)?,
        args.f32(EPS)?,
    );
    let h = PreparedX::new::<W>(&h);
    let mut out = args.output::<f32>(OUT)?;
    for (weight, rows) in [(WEIGHT_A, ROWS_A), (WEIGHT_B, ROWS_B), (WEIGHT_C, ROWS_C)] {
        let rows = args.u32(rows)? as usize;
        let weight = args.input::<W>(weight)?;
        let (part, rest) = std::mem::take(&mut out).split_at_mut(rows);
        part.par_chunks_mut(ROWS_PER_TASK)
            .enumerate()
            .for_each(|(task, chunk)| {
                let first_row = task * ROWS_PER_TASK;
                h.dot_rows(&weight[first_row * k..(first_row + chunk.len()) * k], k, chunk);
            });
        out = rest;
    }
    Ok(())
}

/// `out[i] = silu(gate[i] · h) * (up[i] · h)`, `h = rmsnorm(x) * norm_weight`,
/// with SiLU·mul's own expression.
pub(super) fn norm_matvec_silu<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    use super::arguments::silu::{EPS, GATE, K, NORM_WEIGHT, OUT, UP, X};
    let k = args.u32(K)? as usize;
    let h = normed(
        args.input::<f32>(X)?,
        args.input::<W>(NORM_WEIGHT)?,
        args.f32(EPS)?,
    );
    let h = PreparedX::new::<W>(&h);
    let (gate, up) = (args.input::<W>(GATE)?, args.input::<W>(UP)?);
    args.output::<f32>(OUT)?
        .par_chunks_mut(ROWS_PER_TASK)
        .enumerate()
        .for_each(|(task, chunk)| {
            let first_row = task * ROWS_PER_TASK;
            let rows = first_row * k..(first_row + chunk.len()) * k;
            let mut ups = [0.0f32; ROWS_PER_TASK];
            let ups = &mut ups[..chunk.len()];
            h.dot_rows(&gate[rows.clone()], k, chunk);
            h.dot_rows(&up[rows], k, ups);
            for (value, u) in chunk.iter_mut().zip(ups) {
                let g = *value;
                *value = g / (1.0 + (-g).exp()) * *u;
            }
        });
    Ok(())
}
