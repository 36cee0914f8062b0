//! RoPE and the KV-cache append of one decode position in one dispatch:
//! the query rotated in place, the key rotated on its way into the key
//! cache, the value copied into the value cache (three dispatches unfused:
//! RoPE on the query, RoPE on the key, KV append). Declared as both op kinds
//! it covers (`Rope+Copy`). A prefill chunk keeps the separate ops,
//! which take many rows.

mod arguments;
mod checks;
pub(crate) mod cpu;
pub mod normed;
pub(crate) use arguments::{
    ARGUMENTS, ATTENTION_SCALING, FIRST, HEAD_DIM, INVERSE_FREQUENCIES, KEY, KEY_CACHE, KV_HEADS,
    MAX_POSITIONS, POSITIONS, QUERY, QUERY_HEADS, VALUE, VALUE_CACHE,
};

use super::attention::Heads;
use super::rope::RopeFrequencies;
use super::{Arguments, WEIGHT_DTYPES, bytes_of, kernel_for, register_weight_kernels};
use crate::error::{Error, Result};
use crate::runtime::{
    Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind, Primitive,
};

pub(crate) use checks::{Checked, check, check_stores};
use cpu::rope_append;

/// Registers `rope_append_<cache dtype>`.
pub fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(
        registry,
        "rope_append",
        rope_append,
        include_str!("rope_append.cu")
    );
    normed::register(registry);
}

/// Where q/k/v's products store with RoPE and the append in their stores
/// (`norm_matvec::rope`, `quantized::linear::fused::rope`): what
/// [`RopeAppend::encode`] takes, less the key and value the products make.
#[derive(Clone, Copy, Debug)]
pub struct RopeAppendStores<'a> {
    /// f32 `[heads.query, heads.dim]`: the rotated query.
    pub query: &'a Buffer,
    /// `[max_positions, heads.key_value * heads.dim]` in the dtype the op
    /// takes: the rotated key is stored at the position.
    pub key_cache: &'a Buffer,
    /// The value cache, of the key cache's shape.
    pub value_cache: &'a Buffer,
    /// RoPE's inverse frequencies and attention scaling.
    pub frequencies: &'a RopeFrequencies,
    /// u32 slots, of which `positions[first]` is the position decoded.
    pub positions: &'a Buffer,
    /// The slot of `positions` holding the position.
    pub first: usize,
    /// The attention geometry (this rank's heads).
    pub heads: Heads,
}

impl RopeAppendStores<'_> {
    /// [`check_stores`] of these stores for `op`, its caches of `cache_dtype`.
    pub(crate) fn check(&self, op: &str, cache_dtype: DType) -> Result<Checked> {
        check_stores(
            op,
            self.query,
            [self.key_cache, self.value_cache],
            cache_dtype,
            self.frequencies,
            self.positions,
            self.first,
            self.heads,
        )
    }
}

/// The fused RoPE and KV-append op for one cache dtype.
#[derive(Clone, Debug)]
pub struct RopeAppend {
    kernel: Kernel,
    cache_dtype: DType,
}

impl RopeAppend {
    /// The op writing caches of `cache_dtype` (f32, f16 or bf16) on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, cache_dtype: DType) -> Result<Self> {
        if !WEIGHT_DTYPES.contains(&cache_dtype) {
            return Err(Error::KernelMissing {
                name: format!("rope_append_{cache_dtype}"),
                backend: device.backend(),
                workaround: format!("the KV cache holds f32, f16 or bf16, not {cache_dtype}"),
                remedies: &[],
            });
        }
        Ok(RopeAppend {
            kernel: kernel_for(registry, device, "rope_append", cache_dtype)?,
            cache_dtype,
        })
    }

    /// Rotates `query` f32 `[heads.query, head_dim]` in place and stores the
    /// rotated `key` and the `value` (f32 `[heads.key_value, head_dim]`) at
    /// position `positions[first]` of the caches `[max_positions, kv_dim]`;
    /// `heads.dim` must be twice the number of inverse frequencies.
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        query: &Buffer,
        key: &Buffer,
        value: &Buffer,
        key_cache: &Buffer,
        value_cache: &Buffer,
        frequencies: &RopeFrequencies,
        positions: &Buffer,
        first: usize,
        heads: Heads,
    ) -> Result<()> {
        let Checked {
            half,
            kv_dim,
            max_positions,
        } = check(
            "rope_append",
            [query, key, value],
            [key_cache, value_cache],
            self.cache_dtype,
            frequencies,
            positions,
            first,
            heads,
        )?;
        let inverse_frequencies = &frequencies.inverse_frequencies;
        let head_dim = 2 * half;
        let rotated = (heads.query + heads.key_value) * half;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(QUERY, query)
                .buffer(KEY, key)
                .buffer(VALUE, value)
                .buffer(KEY_CACHE, key_cache)
                .buffer(VALUE_CACHE, value_cache)
                .buffer(INVERSE_FREQUENCIES, inverse_frequencies)
                .buffer(POSITIONS, positions)
                .scalar(FIRST, first as u32)
                .scalar(MAX_POSITIONS, max_positions as u32)
                .scalar(QUERY_HEADS, heads.query as u32)
                .scalar(KV_HEADS, heads.key_value as u32)
                .scalar(HEAD_DIM, head_dim as u32)
                .scalar(ATTENTION_SCALING, frequencies.attention_scaling)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid::linear(rotated + kv_dim, 128))
                // The query rotated in place; the new key and value rows
                // read and stored in the caches.
                .cost(
                    bytes_of(query.len() + 2 * kv_dim + half, DType::F32) + 4,
                    bytes_of(query.len(), DType::F32) + bytes_of(2 * kv_dim, self.cache_dtype),
                    6 * (query.len() + kv_dim) as u64,
                )
                .op_kind(OpKind::fused(&[Primitive::Rope, Primitive::Copy])),
        )
    }
}
