//! Decode attention with RoPE and the KV-cache append fused in
//! (`attention_rope_split_d<dim>_g<group>_<cache dtype>`): the vector split
//! kernels, given the query and this position's key as the q/k/v mat-vecs
//! left them, rotate both in registers, take this position's key and value
//! from those rows rather than from the cache (one block stores them there
//! for the next tokens), and write the same partials; the combine step
//! follows as for [`Attention::encode`]. Three launches become two.
//!
//! The decode engine does not take it: measured on an H200 (docs/PERF.md,
//! "RoPE inside attention"), the fused kernel took 6.1 µs where the split
//! attention it replaces took 3.1 µs and the RoPE-and-append kernel about
//! 1.5 µs, and decode ran 2-3 % slower. Each block of the split grid rotates
//! the query and the fresh key before its first dot product, a chain the
//! separate kernel paid once and off the attention's critical path. It is
//! kept, tested against its CPU reference and clean under compute-sanitizer,
//! as the starting point of a kernel that hides that chain.
//!
//! It runs where the vector kernels' lanes hold whole heads: 64 or 128
//! elements exactly (RoPE pairs element d with d + dim / 2, which a lane
//! then finds in the lane dim / 2 elements away), caches 16-byte aligned.
//! Elsewhere [`Attention::fuses_rope`] says no and the engine keeps
//! `rope_append` then `attention`. The query is left unrotated in memory:
//! decode reads it nowhere else.

use super::{Attention, Heads};
use crate::error::{Error, Result};
use crate::ops::rope::RopeFrequencies;
use crate::ops::rope_append::{Checked, check};
use crate::ops::{Arguments, bytes_of, expect};
use crate::runtime::{Buffer, CommandEncoder, DType, OpKind, Primitive};

pub(crate) use super::arguments::rope::ARGUMENTS;
use super::arguments::rope::{
    ATTENTION_SCALING, DIM, INDEX, INVERSE_FREQUENCIES, KEY, KEY_CACHE, KV_HEADS, MAX_POSITIONS, PARTIALS,
    POSITION_SLOT, QUERY, QUERY_HEADS, SPLITS, VALUE, VALUE_CACHE,
};
use super::arguments::{VECTOR_DIMS, VECTOR_THREADS};

impl Attention {
    /// Whether [`encode_with_rope`](Self::encode_with_rope) runs for
    /// `heads` over these caches: a vector kernel fits, its head is exactly
    /// 64 or 128 elements, and RoPE rotates the whole head (`frequencies`
    /// hold half a head).
    pub fn fuses_rope(
        &self,
        heads: Heads,
        key_cache: &Buffer,
        value_cache: &Buffer,
        frequencies: &RopeFrequencies,
    ) -> bool {
        self.vector_place(heads, key_cache, value_cache)
            .is_some_and(|(dim, _, _)| VECTOR_DIMS[dim] == heads.dim)
            && frequencies.inverse_frequencies.len() * 2 == heads.dim
    }

    /// What `rope_append` (the query rotated, the rotated `key` and the
    /// `value`, f32 `[heads.key_value, heads.dim]`, stored at position
    /// `position_slot[index]` of the caches) then [`encode`](Self::encode)
    /// compute, in two dispatches; `query` (f32 `[heads.query, heads.dim]`,
    /// before RoPE) is left as it is. An error naming the unfused ops where
    /// [`fuses_rope`](Self::fuses_rope) says no.
    #[allow(clippy::too_many_arguments)]
    pub fn encode_with_rope(
        &self,
        encoder: &mut CommandEncoder,
        query: &Buffer,
        key: &Buffer,
        value: &Buffer,
        key_cache: &Buffer,
        value_cache: &Buffer,
        frequencies: &RopeFrequencies,
        position_slot: &Buffer,
        index: usize,
        heads: Heads,
        context: usize,
        scratch: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        const OP: &str = "attention with RoPE";
        // The shapes rope_append checks (the heads, the frequencies, q/k/v,
        // the caches, the position slot), then attention's output.
        let Checked {
            kv_dim,
            max_positions,
            ..
        } = check(
            OP,
            [query, key, value],
            [key_cache, value_cache],
            self.cache_dtype,
            frequencies,
            position_slot,
            index,
            heads,
        )?;
        expect(OP, "output", out, DType::F32, &[heads.query, heads.dim])?;
        let place = self
            .vector_place(heads, key_cache, value_cache)
            .filter(|_| self.fuses_rope(heads, key_cache, value_cache, frequencies));
        let Some((dim, group_index, per_block)) = place else {
            return Err(Error::KernelMissing {
                name: format!("attention_rope_split_{}", self.cache_dtype),
                backend: encoder.device().backend(),
                workaround: format!(
                    "RoPE is fused into attention for heads of exactly 64 or 128 elements over 16-byte aligned caches \
                     (these: {} elements, {} frequencies); encode rope_append, then attention",
                    heads.dim,
                    frequencies.inverse_frequencies.len()
                ),
                remedies: &[],
            });
        };
        let kernel = &self.vector_rope[dim][group_index];
        let splits = Self::splits(heads, max_positions);
        let partials = Self::partials(heads, max_positions, scratch)?;
        let cache_bytes = self.cache_dtype.size_in_bytes() as u64;
        let bytes_per_position = 2 * kv_dim as u64 * cache_bytes;
        let flops_per_position = 4 * (heads.query * heads.dim) as u64;
        // The current position's rows come from `key` and `value` (f32),
        // the others from the cache; the rotation is 6 flops an element.
        let cached = context.saturating_sub(1) as u64;
        let fresh_bytes = bytes_of(query.len() + 2 * kv_dim + heads.dim / 2, DType::F32);
        let rotation_flops = 6 * (query.len() + kv_dim) as u64;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(QUERY, query)
                .buffer(KEY, key)
                .buffer(VALUE, value)
                .buffer(KEY_CACHE, key_cache)
                .buffer(VALUE_CACHE, value_cache)
                .buffer(INVERSE_FREQUENCIES, &frequencies.inverse_frequencies)
                .buffer(POSITION_SLOT, position_slot)
                .buffer(PARTIALS, &partials)
                .scalar(INDEX, index as u32)
                .scalar(QUERY_HEADS, heads.query as u32)
                .scalar(KV_HEADS, heads.key_value as u32)
                .scalar(DIM, heads.dim as u32)
                .scalar(MAX_POSITIONS, max_positions as u32)
                .scalar(SPLITS, splits as u32)
                .scalar(ATTENTION_SCALING, frequencies.attention_scaling)
                .dispatch(kernel)?
                .grid(Self::split_grid(heads, splits, per_block, VECTOR_THREADS))
                .cost(
                    cached * bytes_per_position + fresh_bytes,
                    bytes_of(partials.len(), DType::F32) + bytes_of(2 * kv_dim, self.cache_dtype),
                    context as u64 * flops_per_position + rotation_flops,
                )
                .cost_per_position(context as u64, bytes_per_position, flops_per_position)
                .op_kind(OpKind::fused(&[
                    Primitive::Rope,
                    Primitive::Copy,
                    Primitive::Attention,
                ])),
        )?;
        encoder.dispatch(self.combine(&partials, out, None, heads, splits)?)
    }
}
