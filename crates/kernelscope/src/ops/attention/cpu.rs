//! CPU reference of decode attention; heads in parallel.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::runtime::KernelArgs;

/// args: q `[hq, d]`, key cache, value cache `[max, hkv*d]`, position slot u32 (read),
/// out `[hq, d]` (write), slot index, hq, hkv, d, max positions.
pub(super) fn attention(args: &KernelArgs<'_>) -> Result<()> {
    let query = args.input::<f32>(0)?;
    let (key_cache, value_cache) = (args.input::<f32>(1)?, args.input::<f32>(2)?);
    let position = args.input::<u32>(3)?[args.u32(5)? as usize] as usize;
    let out = args.output::<f32>(4)?;
    let (query_heads, kv_heads, dim) = (
        args.u32(6)? as usize,
        args.u32(7)? as usize,
        args.u32(8)? as usize,
    );
    let max_positions = args.u32(9)? as usize;
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
