//! CPU reference of the fused RoPE and KV append: the RoPE reference's
//! rotation applied to the query in place and to a copy of the key, which
//! is stored with the values as the KV-append reference stores them.

use crate::error::{Error, Result};
use crate::ops::WeightElement;
use crate::ops::rope::cpu::{rotate, rotations};
use crate::runtime::KernelArgs;

use super::{
    ATTENTION_SCALING, FIRST, HEAD_DIM, INVERSE_FREQUENCIES, KEY, KEY_CACHE, KV_HEADS, MAX_POSITIONS,
    POSITIONS, QUERY, QUERY_HEADS, VALUE, VALUE_CACHE,
};

/// Rotates `query` `[query_heads, head_dim]` in place and stores the rotated
/// `key` and the `value` (`[kv_heads, head_dim]`) at `positions[first]` of
/// the caches, rounded to the cache's dtype `C`.
pub(super) fn rope_append<C: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let query = args.output::<f32>(QUERY)?;
    let (key, value) = (args.input::<f32>(KEY)?, args.input::<f32>(VALUE)?);
    let (key_cache, value_cache) = (args.output::<C>(KEY_CACHE)?, args.output::<C>(VALUE_CACHE)?);
    let inverse_frequencies = args.input::<f32>(INVERSE_FREQUENCIES)?;
    let first = args.u32(FIRST)? as usize;
    let position = *args
        .input::<u32>(POSITIONS)?
        .get(first)
        .ok_or_else(|| Error::KernelFailed {
            kernel: "rope_append".into(),
            message: format!("position slot {first} is beyond the positions given"),
        })?;
    let max_positions = args.u32(MAX_POSITIONS)? as usize;
    let kv_dim = args.u32(KV_HEADS)? as usize * args.u32(HEAD_DIM)? as usize;
    let head_dim = (args.u32(HEAD_DIM)? as usize).max(2);
    let query_heads = args.u32(QUERY_HEADS)? as usize;
    if position as usize >= max_positions {
        return Err(Error::KernelFailed {
            kernel: "rope_append".into(),
            message: format!("position {position} is beyond the cache's {max_positions} positions"),
        });
    }
    let rotations = rotations(position, inverse_frequencies, args.f32(ATTENTION_SCALING)?);
    for head in query[..query_heads * head_dim].chunks_exact_mut(head_dim) {
        rotate(head, &rotations);
    }
    let mut rotated_key = key[..kv_dim].to_vec();
    for head in rotated_key.chunks_exact_mut(head_dim) {
        rotate(head, &rotations);
    }
    let at = position as usize * kv_dim..(position as usize + 1) * kv_dim;
    for (cache, source) in key_cache[at.clone()].iter_mut().zip(&rotated_key) {
        *cache = C::from_f32(*source);
    }
    for (cache, source) in value_cache[at].iter_mut().zip(&value[..kv_dim]) {
        *cache = C::from_f32(*source);
    }
    Ok(())
}
