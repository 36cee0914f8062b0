//! CPU references of the fused ops: the composition of the RMSNorm and
//! mat-vec references (the same arithmetic, in the same order), so the
//! fused CUDA kernels are tested against exactly what the unfused path does.

use rayon::prelude::*;

use crate::cpu_simd::dot::PreparedX;
use crate::error::Result;
use crate::ops::WeightElement;
use crate::ops::rms_norm::cpu::scale_of;
use crate::ops::rope_append::cpu::{cached_position, rotate_and_append};
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

/// `weight · h` into `out`, `out.len()` rows of `k`, in parallel tasks.
fn dot_rows_into<W: WeightElement>(h: &PreparedX, weight: &[W], k: usize, out: &mut [f32]) {
    out.par_chunks_mut(ROWS_PER_TASK)
        .enumerate()
        .for_each(|(task, chunk)| {
            let first_row = task * ROWS_PER_TASK;
            h.dot_rows(&weight[first_row * k..(first_row + chunk.len()) * k], k, chunk);
        });
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
        dot_rows_into(&h, weight, k, part);
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

/// RMSNorm, q/k/v's mat-vecs, RoPE and the KV append: `norm_matvec` into
/// q, k and v, then `rope_append`'s rotation of q and k, k and v stored at
/// `positions[first]` of the caches (of the weights' dtype).
pub(super) fn norm_matvec_rope<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    use super::arguments::rope::{
        ATTENTION_SCALING, EPS, FIRST, HEAD_DIM, INVERSE_FREQUENCIES, K, KEY_CACHE, KV_HEADS, MAX_POSITIONS,
        NORM_WEIGHT, POSITIONS, QUERY, QUERY_HEADS, VALUE_CACHE, WEIGHT_K, WEIGHT_Q, WEIGHT_V, X,
    };
    let k = args.u32(K)? as usize;
    let head_dim = (args.u32(HEAD_DIM)? as usize).max(2);
    let query_rows = args.u32(QUERY_HEADS)? as usize * head_dim;
    let kv_dim = args.u32(KV_HEADS)? as usize * head_dim;
    let position = cached_position(
        "norm_matvec_rope",
        args.input::<u32>(POSITIONS)?,
        args.u32(FIRST)? as usize,
        args.u32(MAX_POSITIONS)? as usize,
    )?;
    let h = normed(
        args.input::<f32>(X)?,
        args.input::<W>(NORM_WEIGHT)?,
        args.f32(EPS)?,
    );
    let h = PreparedX::new::<W>(&h);
    let query = &mut args.output::<f32>(QUERY)?[..query_rows];
    dot_rows_into(&h, args.input::<W>(WEIGHT_Q)?, k, query);
    let (mut key, mut value) = (vec![0.0f32; kv_dim], vec![0.0f32; kv_dim]);
    dot_rows_into(&h, args.input::<W>(WEIGHT_K)?, k, &mut key);
    dot_rows_into(&h, args.input::<W>(WEIGHT_V)?, k, &mut value);
    rotate_and_append(
        query,
        &mut key,
        &value,
        [args.output::<W>(KEY_CACHE)?, args.output::<W>(VALUE_CACHE)?],
        (
            args.input::<f32>(INVERSE_FREQUENCIES)?,
            args.f32(ATTENTION_SCALING)?,
        ),
        head_dim,
        position,
    );
    Ok(())
}
