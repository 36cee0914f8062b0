//! CPU reference of a prefill chunk's causal attention: every (row, head)
//! in parallel, softmax in f32 over the positions up to the row's own.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ops::WeightElement;
use crate::ops::cpu_exp::exp;
use crate::runtime::KernelArgs;

use super::{
    DIM, FIRST, KEY_CACHE, KV_HEADS, MAX_POSITIONS, OUT, POSITIONS, QUERY, QUERY_HEADS, ROWS, VALUE_CACHE,
};

/// `out` `[rows, query_heads, dim]` (rounded to `O`): row r, head h attends
/// to cache positions `0..=positions[first + r]` of KV head `h / group`.
pub(super) fn prefill_attention<C: WeightElement, O: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let query = args.input::<f32>(QUERY)?;
    let (key_cache, value_cache) = (args.input::<C>(KEY_CACHE)?, args.input::<C>(VALUE_CACHE)?);
    let positions = args.input::<u32>(POSITIONS)?;
    let out = args.output::<O>(OUT)?;
    let (first, rows) = (args.u32(FIRST)? as usize, args.u32(ROWS)? as usize);
    let (query_heads, kv_heads, dim) = (
        args.u32(QUERY_HEADS)? as usize,
        args.u32(KV_HEADS)? as usize,
        args.u32(DIM)? as usize,
    );
    let max_positions = args.u32(MAX_POSITIONS)? as usize;
    if let Some(&position) = positions[first..first + rows]
        .iter()
        .find(|&&position| position as usize >= max_positions)
    {
        return Err(Error::KernelFailed {
            kernel: "prefill_attention".into(),
            message: format!("position {position} is beyond the cache's {max_positions} positions"),
        });
    }
    let group = query_heads / kv_heads;
    let kv_dim = kv_heads * dim;
    let scale = 1.0 / (dim as f32).sqrt();
    // Scratch per task, not per (row, head): the scores and the weighted sum.
    let scratch = || (Vec::<f32>::new(), vec![0f32; dim]);
    out.par_chunks_mut(dim)
        .enumerate()
        .for_each_init(scratch, |(scores, sum), (entry, out_head)| {
            let (row, head) = (entry / query_heads, entry % query_heads);
            let position = positions[first + row] as usize;
            let q = &query[entry * dim..(entry + 1) * dim];
            let kv_offset = (head / group) * dim;
            let at = |p: usize| p * kv_dim + kv_offset..p * kv_dim + kv_offset + dim;
            scores.clear();
            scores.extend((0..=position).map(|p| dot(q, &key_cache[at(p)]) * scale));
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut total = 0.0;
            sum.fill(0.0);
            for (p, score) in scores.iter().enumerate() {
                let weight = exp(score - max);
                total += weight;
                sum.iter_mut()
                    .zip(&value_cache[at(p)])
                    .for_each(|(s, v)| *s += weight * v.to_f32());
            }
            for (o, s) in out_head.iter_mut().zip(sum.iter()) {
                *o = O::from_f32(s / total);
            }
        });
    Ok(())
}

/// Σ `q[i]·k[i]` in [`LANES`] interleaved partial sums, which the compiler
/// keeps in vector registers, rather than one chain of dependent adds that
/// it may not reorder (the chain made prefill attention 7 % of a 64-token
/// prefill).
fn dot<C: WeightElement>(q: &[f32], k: &[C]) -> f32 {
    const LANES: usize = 16;
    let mut lanes = [0f32; LANES];
    let (q_chunks, k_chunks) = (q.chunks_exact(LANES), k.chunks_exact(LANES));
    let rest: f32 = q_chunks
        .remainder()
        .iter()
        .zip(k_chunks.remainder())
        .map(|(a, b)| a * b.to_f32())
        .sum();
    for (q, k) in q_chunks.zip(k_chunks) {
        for ((lane, a), b) in lanes.iter_mut().zip(q).zip(k) {
            *lane += a * b.to_f32();
        }
    }
    // Halving, so the lanes are summed in four vector adds rather than a
    // chain of fifteen.
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for lane in 0..width {
            lanes[lane] += lanes[lane + width];
        }
    }
    lanes[0] + rest
}
