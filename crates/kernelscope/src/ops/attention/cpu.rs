//! CPU reference of split decode attention: the same splits, per-split
//! partials and combination as the CUDA kernels, so the combine step is
//! tested on every backend; and of the RoPE-fused split, which is RoPE's
//! and the KV append's references before the split's.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ops::WeightElement;
use crate::ops::rope::cpu::{rotate, rotations};
use crate::runtime::KernelArgs;

use super::arguments::combine::{
    DIM as COMBINE_DIM, OUT as COMBINE_OUT, PARTIALS as COMBINE_PARTIALS, QUERY_HEADS as COMBINE_QUERY_HEADS,
    SPLITS as COMBINE_SPLITS,
};
use super::{
    DIM, INDEX, KEY_CACHE, KV_HEADS, MAX_POSITIONS, PARTIALS, POSITION_SLOT, QUERY, QUERY_HEADS, SPLITS,
    VALUE_CACHE,
};

/// Per split and query head, `(output before normalising, max, sum)` over
/// the split's positions, in `partials` `[splits][query_heads][dim + 2]`.
pub(super) fn attention_split<C: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let position = args.input::<u32>(POSITION_SLOT)?[args.u32(INDEX)? as usize] as usize;
    let geometry = Geometry::read(args, [QUERY_HEADS, KV_HEADS, DIM, MAX_POSITIONS, SPLITS])?;
    geometry.check("attention_split", position)?;
    split_partials(
        args.input::<f32>(QUERY)?,
        args.input::<C>(KEY_CACHE)?,
        args.input::<C>(VALUE_CACHE)?,
        position,
        geometry,
        args.output::<f32>(PARTIALS)?,
    );
    Ok(())
}

/// The RoPE-fused split (`attention_rope_split_*`): what `rope_append` then
/// `attention_split` compute, except that the query is left as given. The
/// query and this position's key are rotated (RoPE's reference), the key
/// and the value stored at the position of the caches, rounded to `C`,
/// then the split's partials taken over the rotated query.
pub(super) fn attention_rope_split<C: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    use super::arguments::rope::{
        ATTENTION_SCALING, DIM, INDEX, INVERSE_FREQUENCIES, KEY, KEY_CACHE, KV_HEADS, MAX_POSITIONS,
        PARTIALS, POSITION_SLOT, QUERY, QUERY_HEADS, SPLITS, VALUE, VALUE_CACHE,
    };
    let position = args.input::<u32>(POSITION_SLOT)?[args.u32(INDEX)? as usize];
    let geometry = Geometry::read(args, [QUERY_HEADS, KV_HEADS, DIM, MAX_POSITIONS, SPLITS])?;
    geometry.check("attention_rope_split", position as usize)?;
    let (dim, kv_dim) = (geometry.dim, geometry.kv_heads * geometry.dim);
    let rotations = rotations(
        position,
        args.input::<f32>(INVERSE_FREQUENCIES)?,
        args.f32(ATTENTION_SCALING)?,
    );
    let mut query = args.input::<f32>(QUERY)?[..geometry.query_heads * dim].to_vec();
    let mut key = args.input::<f32>(KEY)?[..kv_dim].to_vec();
    for head in query.chunks_exact_mut(dim).chain(key.chunks_exact_mut(dim)) {
        rotate(head, &rotations);
    }
    let (key_cache, value_cache) = (args.output::<C>(KEY_CACHE)?, args.output::<C>(VALUE_CACHE)?);
    let at = position as usize * kv_dim..(position as usize + 1) * kv_dim;
    for (cache, source) in key_cache[at.clone()].iter_mut().zip(&key) {
        *cache = C::from_f32(*source);
    }
    for (cache, source) in value_cache[at]
        .iter_mut()
        .zip(&args.input::<f32>(VALUE)?[..kv_dim])
    {
        *cache = C::from_f32(*source);
    }
    split_partials(
        &query,
        key_cache,
        value_cache,
        position as usize,
        geometry,
        args.output::<f32>(PARTIALS)?,
    );
    Ok(())
}

/// The head geometry and cache length a split kernel is given.
#[derive(Clone, Copy)]
struct Geometry {
    query_heads: usize,
    kv_heads: usize,
    dim: usize,
    max_positions: usize,
    splits: usize,
}

impl Geometry {
    /// The geometry a kernel's arguments give, from the positions of its
    /// query heads, KV heads, head dim, cache length and splits.
    fn read(args: &KernelArgs<'_>, positions: [usize; 5]) -> Result<Geometry> {
        let [query_heads, kv_heads, dim, max_positions, splits] =
            positions.map(|position| args.u32(position).map(|value| value as usize));
        Ok(Geometry {
            query_heads: query_heads?,
            kv_heads: kv_heads?,
            dim: dim?,
            max_positions: max_positions?,
            splits: splits?,
        })
    }

    /// Refuses what no split can compute, naming `kernel`.
    fn check(self, kernel: &str, position: usize) -> Result<()> {
        let Geometry {
            query_heads,
            kv_heads,
            max_positions,
            splits,
            ..
        } = self;
        if position >= max_positions || kv_heads == 0 || query_heads % kv_heads != 0 || splits == 0 {
            return Err(Error::KernelFailed {
                kernel: kernel.into(),
                message: format!(
                    "position {position} of {max_positions}, {query_heads} query heads over {kv_heads} kv heads, {splits} splits"
                ),
            });
        }
        Ok(())
    }
}

/// Each split's partials over the caches' positions `0..=position`.
fn split_partials<C: WeightElement>(
    query: &[f32],
    key_cache: &[C],
    value_cache: &[C],
    position: usize,
    geometry: Geometry,
    partials: &mut [f32],
) {
    let Geometry {
        query_heads,
        kv_heads,
        dim,
        splits,
        ..
    } = geometry;
    let group = query_heads / kv_heads;
    let kv_dim = kv_heads * dim;
    let scale = 1.0 / (dim as f32).sqrt();
    let count = position + 1;
    let per_split = count.div_ceil(splits);
    let stride = dim + 2;
    partials
        .par_chunks_mut(stride)
        .enumerate()
        .for_each(|(entry, partial)| {
            let (split, head) = (entry / query_heads, entry % query_heads);
            let begin = split * per_split;
            let end = (begin + per_split).min(count);
            let q = &query[head * dim..(head + 1) * dim];
            let kv_offset = (head / group) * dim;
            let scores: Vec<f32> = (begin..end)
                .map(|p| {
                    let k = &key_cache[p * kv_dim + kv_offset..p * kv_dim + kv_offset + dim];
                    q.iter().zip(k).map(|(a, b)| a * b.to_f32()).sum::<f32>() * scale
                })
                .collect();
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            partial.fill(0.0);
            let mut sum = 0.0;
            for (p, score) in (begin..end).zip(&scores) {
                let weight = (score - max).exp();
                sum += weight;
                let v = &value_cache[p * kv_dim + kv_offset..p * kv_dim + kv_offset + dim];
                partial[..dim]
                    .iter_mut()
                    .zip(v)
                    .for_each(|(o, v)| *o += weight * v.to_f32());
            }
            partial[dim] = max;
            partial[dim + 1] = sum;
        });
}

/// `attention_combine_f32`: the splits' partials merged into each head's output.
pub(super) fn attention_combine(args: &KernelArgs<'_>) -> Result<()> {
    let partials = args.input::<f32>(COMBINE_PARTIALS)?;
    let out = args.output::<f32>(COMBINE_OUT)?;
    let (query_heads, dim, splits) = (
        args.u32(COMBINE_QUERY_HEADS)? as usize,
        args.u32(COMBINE_DIM)? as usize,
        args.u32(COMBINE_SPLITS)? as usize,
    );
    combine_into(partials, out, query_heads, dim, splits);
    Ok(())
}

/// `attention_combine_q8`: the same, and the output quantized as
/// `quantize_q8` quantizes it.
pub(super) fn attention_combine_q8(args: &KernelArgs<'_>) -> Result<()> {
    use super::arguments::combine_quantized::{DIM, OUT, PARTIALS, QUANTIZED, QUERY_HEADS, SPLITS};
    let partials = args.input::<f32>(PARTIALS)?;
    let out = args.output::<f32>(OUT)?;
    let quantized = args.output::<u8>(QUANTIZED)?;
    let (query_heads, dim, splits) = (
        args.u32(QUERY_HEADS)? as usize,
        args.u32(DIM)? as usize,
        args.u32(SPLITS)? as usize,
    );
    let values = query_heads * dim;
    if !dim.is_multiple_of(32) || out.len() < values || quantized.len() < values + values / 4 {
        return Err(Error::KernelFailed {
            kernel: "attention_combine_q8".into(),
            message: format!(
                "head dimension {dim} is not whole blocks of 32, or a buffer is shorter than {query_heads} heads"
            ),
        });
    }
    combine_into(partials, out, query_heads, dim, splits);
    crate::ops::quantized::linear::stage::stage_values(&out[..values], quantized);
    Ok(())
}

/// Each head's splits merged into `out` `[query_heads][dim]`.
fn combine_into(partials: &[f32], out: &mut [f32], query_heads: usize, dim: usize, splits: usize) {
    let stride = dim + 2;
    out.par_chunks_mut(dim.max(1))
        .take(query_heads)
        .enumerate()
        .for_each(|(head, out_head)| {
            let split = |s: usize| {
                &partials[(s * query_heads + head) * stride..(s * query_heads + head + 1) * stride]
            };
            let best = (0..splits)
                .map(|s| split(s)[dim])
                .fold(f32::NEG_INFINITY, f32::max);
            let weights: Vec<f32> = (0..splits)
                .map(|s| {
                    let max = split(s)[dim];
                    if max == f32::NEG_INFINITY {
                        0.0
                    } else {
                        (max - best).exp()
                    }
                })
                .collect();
            let total: f32 = (0..splits).map(|s| split(s)[dim + 1] * weights[s]).sum();
            for (d, o) in out_head.iter_mut().enumerate() {
                *o = (0..splits).map(|s| split(s)[d] * weights[s]).sum::<f32>() / total;
            }
        });
}
