//! Appends rows of keys and values to a layer's KV cache, in the cache's
//! dtype (the weights' dtype by default, f32 for the reference path), each
//! at a position held in device memory: decode appends one row at the step's
//! position, a batched prefill a chunk's rows at theirs.

mod arguments;
mod cpu;
pub(crate) use arguments::{
    ARGUMENTS, FIRST, KEY, KEY_CACHE, KV_DIM, MAX_POSITIONS, POSITIONS, ROWS, VALUE, VALUE_CACHE,
};

use super::{
    Arguments, WEIGHT_DTYPES, bytes_of, dimensions, expect_indices, expect_kv_caches, expect_rows,
    kernel_for, register_weight_kernels, rows_of,
};
use crate::error::{Error, Result};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

use cpu::kv_append;

/// Registers `kv_append_<cache dtype>`.
pub fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(registry, "kv_append", kv_append, include_str!("kv_append.cu"));
}

/// The KV-append op for one cache dtype.
#[derive(Clone, Debug)]
pub struct KvAppend {
    kernel: Kernel,
    cache_dtype: DType,
}

impl KvAppend {
    /// The op writing caches of `cache_dtype` (f32, f16 or bf16) on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, cache_dtype: DType) -> Result<Self> {
        if !WEIGHT_DTYPES.contains(&cache_dtype) {
            return Err(Error::KernelMissing {
                name: format!("kv_append_{cache_dtype}"),
                backend: device.backend(),
                workaround: format!("the KV cache holds f32, f16 or bf16, not {cache_dtype}"),
                remedies: &[],
            });
        }
        Ok(KvAppend {
            kernel: kernel_for(registry, device, "kv_append", cache_dtype)?,
            cache_dtype,
        })
    }

    /// `key_cache[positions[first + r]] = key[r]`, likewise for values, for
    /// every row r of `key` and `value` (f32 `[rows, kv_dim]`), with caches
    /// `[max_positions, kv_dim]`.
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        key: &Buffer,
        value: &Buffer,
        key_cache: &Buffer,
        value_cache: &Buffer,
        positions: &Buffer,
        first: usize,
    ) -> Result<()> {
        let [max_positions, kv_dim] = dimensions("kv_append", "key cache", key_cache)?;
        let rows = rows_of("kv_append", "key", key, kv_dim)?;
        expect_rows("kv_append", "key", key, DType::F32, rows, &[kv_dim])?;
        expect_rows("kv_append", "value", value, DType::F32, rows, &[kv_dim])?;
        expect_kv_caches("kv_append", key_cache, value_cache, self.cache_dtype, kv_dim)?;
        expect_indices("kv_append", "positions", positions, first, rows)?;
        let elements = rows * kv_dim;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(KEY, key)
                .buffer(VALUE, value)
                .buffer(KEY_CACHE, key_cache)
                .buffer(VALUE_CACHE, value_cache)
                .buffer(POSITIONS, positions)
                .scalar(FIRST, first as u32)
                .scalar(ROWS, rows as u32)
                .scalar(MAX_POSITIONS, max_positions as u32)
                .scalar(KV_DIM, kv_dim as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid::linear(elements, 256))
                .cost(
                    bytes_of(2 * elements, DType::F32) + 4 * rows as u64,
                    bytes_of(2 * elements, self.cache_dtype),
                    0,
                )
                .op_kind(OpKind::Copy),
        )
    }
}
