//! CPU reference of the KV-cache append.

use crate::error::{Error, Result};
use crate::ops::WeightElement;
use crate::runtime::KernelArgs;

use super::{FIRST, KEY, KEY_CACHE, KV_DIM, MAX_POSITIONS, POSITIONS, ROWS, VALUE, VALUE_CACHE};

/// Row r of `key` and `value` (f32 `[rows, kv_dim]`) becomes row
/// `positions[first + r]` of the caches `[max_positions, kv_dim]`, rounded
/// to the cache's dtype `C`.
pub(super) fn kv_append<C: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let (key, value) = (args.input::<f32>(KEY)?, args.input::<f32>(VALUE)?);
    let (key_cache, value_cache) = (args.output::<C>(KEY_CACHE)?, args.output::<C>(VALUE_CACHE)?);
    let positions = args.input::<u32>(POSITIONS)?;
    let (first, rows) = (args.u32(FIRST)? as usize, args.u32(ROWS)? as usize);
    let max_positions = args.u32(MAX_POSITIONS)? as usize;
    let kv_dim = args.u32(KV_DIM)? as usize;
    for row in 0..rows {
        let position = positions[first + row] as usize;
        if position >= max_positions {
            return Err(Error::KernelFailed {
                kernel: "kv_append".into(),
                message: format!("position {position} is beyond the cache's {max_positions} positions"),
            });
        }
        let source = row * kv_dim..(row + 1) * kv_dim;
        let destination = position * kv_dim..(position + 1) * kv_dim;
        for ((k, v), (kc, vc)) in key[source.clone()].iter().zip(&value[source]).zip(
            key_cache[destination.clone()]
                .iter_mut()
                .zip(&mut value_cache[destination]),
        ) {
            *kc = C::from_f32(*k);
            *vc = C::from_f32(*v);
        }
    }
    Ok(())
}
