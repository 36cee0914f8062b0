//! CPU reference of decode attention; heads in parallel.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::runtime::KernelArgs;

use super::{
    DIM, INDEX, KEY_CACHE, KV_HEADS, MAX_POSITIONS, OUT, POSITION_SLOT, QUERY, QUERY_HEADS, VALUE_CACHE,
};

/// `out` `[query_heads, dim]` from `query` (same shape) and the caches
/// `[max_positions, kv_heads · dim]`, attending to positions up to
/// `position_slot[index]`.
pub(super) fn attention(args: &KernelArgs<'_>) -> Result<()> {
    let query = args.input::<f32>(QUERY)?;
    let (key_cache, value_cache) = (args.input::<f32>(KEY_CACHE)?, args.input::<f32>(VALUE_CACHE)?);
    let position = args.input::<u32>(POSITION_SLOT)?[args.u32(INDEX)? as usize] as usize;
    let out = args.output::<f32>(OUT)?;
    let (query_heads, kv_heads, dim) = (
        args.u32(QUERY_HEADS)? as usize,
        args.u32(KV_HEADS)? as usize,
        args.u32(DIM)? as usize,
    );
    let max_positions = args.u32(MAX_POSITIONS)? as usize;
    if position >= max_positions || kv_heads == 0 || query_heads % kv_heads != 0 {
        return Err(Error::KernelFailed {
            kernel: "attention".into(),
            message: format!(
                "position {position} of {max_positions}, {query_heads} query heads over {kv_heads} kv heads"
            ),
        });
    }
    let group = query_heads / kv_heads;
    let kv_dim = kv_heads * dim;
    let scale = 1.0 / (dim as f32).sqrt();
    out.par_chunks_mut(dim).enumerate().for_each(|(head, out_head)| {
        let q = &query[head * dim..(head + 1) * dim];
        let kv_offset = (head / group) * dim;
        let mut scores: Vec<f32> = (0..=position)
            .map(|p| {
                let k = &key_cache[p * kv_dim + kv_offset..p * kv_dim + kv_offset + dim];
                q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale
            })
            .collect();
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut total = 0.0;
        for score in &mut scores {
            *score = (*score - max).exp();
            total += *score;
        }
        out_head.fill(0.0);
        for (p, weight) in scores.iter().enumerate() {
            let v = &value_cache[p * kv_dim + kv_offset..p * kv_dim + kv_offset + dim];
            let weight = weight / total;
            out_head.iter_mut().zip(v).for_each(|(o, v)| *o += weight * v);
        }
    });
    Ok(())
}
