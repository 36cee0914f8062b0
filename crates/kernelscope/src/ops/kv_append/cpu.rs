//! CPU reference of the KV-cache append.

use crate::error::{Error, Result};
use crate::runtime::KernelArgs;

/// args: key, value f32 `[kv_dim]`, key cache, value cache f32 `[max, kv_dim]` (read-write),
/// position slot u32, slot index, max positions.
pub(super) fn kv_append(args: &KernelArgs<'_>) -> Result<()> {
    let (key, value) = (args.input::<f32>(0)?, args.input::<f32>(1)?);
    let (key_cache, value_cache) = (args.output::<f32>(2)?, args.output::<f32>(3)?);
    let position = args.input::<u32>(4)?[args.u32(5)? as usize] as usize;
    let max_positions = args.u32(6)? as usize;
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
