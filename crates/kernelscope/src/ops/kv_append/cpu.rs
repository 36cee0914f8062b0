//! CPU reference of the KV-cache append.

use crate::error::{Error, Result};
use crate::runtime::KernelArgs;

use super::{INDEX, KEY, KEY_CACHE, MAX_POSITIONS, POSITION_SLOT, VALUE, VALUE_CACHE};

/// Row `position_slot[index]` of the caches `[max_positions, kv_dim]`
/// becomes `key` and `value` (f32 `[kv_dim]`).
pub(super) fn kv_append(args: &KernelArgs<'_>) -> Result<()> {
    let (key, value) = (args.input::<f32>(KEY)?, args.input::<f32>(VALUE)?);
    let (key_cache, value_cache) = (args.output::<f32>(KEY_CACHE)?, args.output::<f32>(VALUE_CACHE)?);
    let position = args.input::<u32>(POSITION_SLOT)?[args.u32(INDEX)? as usize] as usize;
    let max_positions = args.u32(MAX_POSITIONS)? as usize;
    if position >= max_positions {
        return Err(Error::KernelFailed {
            kernel: "kv_append".into(),
            message: format!("position {position} is beyond the cache's {max_positions} positions"),
        });
    }
    let kv_dim = key.len();
    key_cache[position * kv_dim..(position + 1) * kv_dim].copy_from_slice(key);
    value_cache[position * kv_dim..(position + 1) * kv_dim].copy_from_slice(value);
    Ok(())
}
