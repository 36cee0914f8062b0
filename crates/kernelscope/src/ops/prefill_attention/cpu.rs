//! CPU reference of a prefill chunk's causal attention: every (row, head)
//! in parallel, softmax in f32 over the positions up to the row's own.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ops::WeightElement;
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
    out.par_chunks_mut(dim).enumerate().for_each(|(entry, out_head)| {
        let (row, head) = (entry / query_heads, entry % query_heads);
        let position = positions[first + row] as usize;
        let q = &query[entry * dim..(entry + 1) * dim];
        let kv_offset = (head / group) * dim;
        let scores: Vec<f32> = (0..=position)
            .map(|p| {
                let k = &key_cache[p * kv_dim + kv_offset..p * kv_dim + kv_offset + dim];
                q.iter().zip(k).map(|(a, b)| a * scale * b.to_f32()).sum::<f32>()
            })
            .collect();
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut total = 0.0;
        let mut sum = vec![0f32; dim];
        for (p, score) in scores.iter().enumerate() {
            let weight = (score - max).exp();
            total += weight;
            let v = &value_cache[p * kv_dim + kv_offset..p * kv_dim + kv_offset + dim];
            sum.iter_mut().zip(v).for_each(|(s, v)| *s += weight * v.to_f32());
        }
        for (o, s) in out_head.iter_mut().zip(&sum) {
            *o = O::from_f32(s / total);
        }
    });
    Ok(())
}
