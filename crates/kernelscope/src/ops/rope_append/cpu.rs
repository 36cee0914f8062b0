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
    let kv_dim = args.u32(KV_HEADS)? as usize * args.u32(HEAD_DIM)? as usize;
    let head_dim = (args.u32(HEAD_DIM)? as usize).max(2);
    let query_heads = args.u32(QUERY_HEADS)? as usize;
    let position = cached_position(
        "rope_append",
        args.input::<u32>(POSITIONS)?,
        args.u32(FIRST)? as usize,
        args.u32(MAX_POSITIONS)? as usize,
    )?;
    rotate_and_append(
        &mut query[..query_heads * head_dim],
        &mut key[..kv_dim].to_vec(),
        &value[..kv_dim],
        [args.output::<C>(KEY_CACHE)?, args.output::<C>(VALUE_CACHE)?],
        (
            args.input::<f32>(INVERSE_FREQUENCIES)?,
            args.f32(ATTENTION_SCALING)?,
        ),
        head_dim,
        position,
    );
    Ok(())
}

/// `positions[first]`, which must be a position the caches of
/// `max_positions` hold; errors name `kernel`.
pub(crate) fn cached_position(
    kernel: &str,
    positions: &[u32],
    first: usize,
    max_positions: usize,
) -> Result<u32> {
    let position = *positions.get(first).ok_or_else(|| Error::KernelFailed {
        kernel: kernel.into(),
        message: format!("position slot {first} is beyond the positions given"),
    })?;
    if position as usize >= max_positions {
        return Err(Error::KernelFailed {
            kernel: kernel.into(),
            message: format!("position {position} is beyond the cache's {max_positions} positions"),
        });
    }
    Ok(position)
}

/// RoPE at `position` (`inverse_frequencies`, `attention_scaling`: the
/// RoPE reference's `rotations`) on each head of `query` and `key` in place, then
/// `key` and `value` (`kv_dim` each) stored at `position` of the caches
/// `[_, kv_dim]`, rounded to `C`: what every op that appends a rotated key
/// does on the CPU.
pub(crate) fn rotate_and_append<C: WeightElement>(
    query: &mut [f32],
    key: &mut [f32],
    value: &[f32],
    [key_cache, value_cache]: [&mut [C]; 2],
    (inverse_frequencies, attention_scaling): (&[f32], f32),
    head_dim: usize,
    position: u32,
) {
    let rotations = rotations(position, inverse_frequencies, attention_scaling);
    for head in query
        .chunks_exact_mut(head_dim)
        .chain(key.chunks_exact_mut(head_dim))
    {
        rotate(head, &rotations);
    }
    let kv_dim = key.len();
    let at = position as usize * kv_dim..(position as usize + 1) * kv_dim;
    for (cache, source) in [(key_cache, &*key), (value_cache, value)] {
        for (stored, value) in cache[at.clone()].iter_mut().zip(source) {
            *stored = C::from_f32(*value);
        }
    }
}
