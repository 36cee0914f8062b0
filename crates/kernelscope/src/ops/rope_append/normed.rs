//! Qwen3's decode attention prologue as one dispatch: each head of q and k
//! RMS-normalised by its `[head_dim]` weight (`q_norm`, `k_norm`), RoPE, and
//! the KV-cache append (`rope_append_normed_<weight>_<cache>`, normed.cu).
//! Unfused it is two `head_norm` dispatches and a `rope_append`; the CPU
//! reference composes theirs, and CUDA's arithmetic is theirs, so the
//! fused and unfused paths agree to f32 rounding.

use half::{bf16, f16};

use super::super::attention::Heads;
use super::super::rms_norm::cpu::scale_of;
use super::super::rope::RopeFrequencies;
use super::super::rope::cpu::{rotate, rotations};
use super::super::{Arguments, WEIGHT_DTYPES, WeightElement, bytes_of, expect, kernel_arguments};
use crate::error::{Error, Result};
use crate::runtime::{
    Buffer, CommandEncoder, DType, Device, Kernel, KernelArgs, KernelRegistry, LaunchGrid, OpKind, Primitive,
};

kernel_arguments! {
    QUERY: "query" ReadWrite,
    KEY: "key" Read,
    VALUE: "value" Read,
    KEY_CACHE: "key_cache" ReadWrite,
    VALUE_CACHE: "value_cache" ReadWrite,
    QUERY_NORM: "query_norm" Read,
    KEY_NORM: "key_norm" Read,
    EPS: "eps" F32,
    INVERSE_FREQUENCIES: "inverse_frequencies" Read,
    POSITIONS: "positions" Read,
    FIRST: "first" U32,
    MAX_POSITIONS: "max_positions" U32,
    QUERY_HEADS: "query_heads" U32,
    KV_HEADS: "kv_heads" U32,
    HEAD_DIM: "head_dim" U32,
    ATTENTION_SCALING: "attention_scaling" F32,
}

/// Registers `rope_append_normed_<weight>_<cache>` for every pair of
/// f32, f16 and bf16.
pub fn register(registry: &mut KernelRegistry) {
    let source: std::sync::Arc<str> = super::super::cuda_source(include_str!("normed.cu")).into();
    macro_rules! cpu_kernels {
        ($($weight:ty, $cache:ty, $name:literal;)*) => {
            $(registry.register_cpu($name, rope_append_normed::<$weight, $cache>);)*
        };
    }
    cpu_kernels! {
        f32, f32, "rope_append_normed_f32_f32";
        f32, f16, "rope_append_normed_f32_f16";
        f32, bf16, "rope_append_normed_f32_bf16";
        f16, f32, "rope_append_normed_f16_f32";
        f16, f16, "rope_append_normed_f16_f16";
        f16, bf16, "rope_append_normed_f16_bf16";
        bf16, f32, "rope_append_normed_bf16_f32";
        bf16, f16, "rope_append_normed_bf16_f16";
        bf16, bf16, "rope_append_normed_bf16_bf16";
    }
    for weight in ["f32", "f16", "bf16"] {
        for cache in ["f32", "f16", "bf16"] {
            registry.register_cuda_source(&format!("rope_append_normed_{weight}_{cache}"), source.clone());
            // The cache's dtype, which its name ends in, as rope_append's.
            registry.register_format(&format!("rope_append_normed_{weight}_{cache}"), cache);
        }
    }
}

/// The CPU reference: each head of the query and of the key normalised in
/// place (the head_norm reference), then the rope_append reference's
/// rotation and append.
fn rope_append_normed<W: WeightElement, C: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let query = args.output::<f32>(QUERY)?;
    let (key, value) = (args.input::<f32>(KEY)?, args.input::<f32>(VALUE)?);
    let (key_cache, value_cache) = (args.output::<C>(KEY_CACHE)?, args.output::<C>(VALUE_CACHE)?);
    let (query_norm, key_norm) = (args.input::<W>(QUERY_NORM)?, args.input::<W>(KEY_NORM)?);
    let eps = args.f32(EPS)?;
    let inverse_frequencies = args.input::<f32>(INVERSE_FREQUENCIES)?;
    let first = args.u32(FIRST)? as usize;
    let failed = |message: String| Error::KernelFailed {
        kernel: "rope_append_normed".into(),
        message,
    };
    let position = *args
        .input::<u32>(POSITIONS)?
        .get(first)
        .ok_or_else(|| failed(format!("position slot {first} is beyond the positions given")))?;
    let max_positions = args.u32(MAX_POSITIONS)? as usize;
    let head_dim = (args.u32(HEAD_DIM)? as usize).max(2);
    let kv_dim = args.u32(KV_HEADS)? as usize * head_dim;
    let query_heads = args.u32(QUERY_HEADS)? as usize;
    if position as usize >= max_positions {
        return Err(failed(format!(
            "position {position} is beyond the cache's {max_positions} positions"
        )));
    }
    let normalise = |head: &mut [f32], weight: &[W]| {
        let scale = scale_of(head, eps);
        for (value, w) in head.iter_mut().zip(weight) {
            *value = *value * scale * w.to_f32();
        }
    };
    let rotations = rotations(position, inverse_frequencies, args.f32(ATTENTION_SCALING)?);
    for head in query[..query_heads * head_dim].chunks_exact_mut(head_dim) {
        normalise(head, query_norm);
        rotate(head, &rotations);
    }
    let mut rotated_key = key[..kv_dim].to_vec();
    for head in rotated_key.chunks_exact_mut(head_dim) {
        normalise(head, key_norm);
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

/// Warps of a CUDA block: a warp per head.
const WARPS: usize = 4;

/// The fused per-head norms, RoPE and KV append for one norm-weight dtype
/// and one cache dtype.
#[derive(Clone, Debug)]
pub struct RopeAppendNormed {
    kernel: Kernel,
    weight_dtype: DType,
    cache_dtype: DType,
}

impl RopeAppendNormed {
    /// The op for norm weights of `weight_dtype` and a cache of
    /// `cache_dtype` (each f32, f16 or bf16) on `device`.
    pub fn new(
        registry: &KernelRegistry,
        device: &Device,
        weight_dtype: DType,
        cache_dtype: DType,
    ) -> Result<Self> {
        let name = format!("rope_append_normed_{weight_dtype}_{cache_dtype}");
        if !WEIGHT_DTYPES.contains(&weight_dtype) || !WEIGHT_DTYPES.contains(&cache_dtype) {
            return Err(Error::KernelMissing {
                name,
                backend: device.backend(),
                workaround: "the norm weights and the KV cache are f32, f16 or bf16".into(),
                remedies: &[],
            });
        }
        Ok(RopeAppendNormed {
            kernel: registry.kernel(device, &name)?,
            weight_dtype,
            cache_dtype,
        })
    }

    /// As [`super::RopeAppend::encode`], each head of `query` and of `key`
    /// first normalised by `query_norm` and `key_norm` (`[head_dim]`) with
    /// `eps`; `query` ends normalised and rotated, `key` is left as it was.
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        query: &Buffer,
        key: &Buffer,
        value: &Buffer,
        key_cache: &Buffer,
        value_cache: &Buffer,
        [query_norm, key_norm]: [&Buffer; 2],
        eps: f32,
        frequencies: &RopeFrequencies,
        positions: &Buffer,
        first: usize,
        heads: Heads,
    ) -> Result<()> {
        let super::checks::Checked {
            half,
            kv_dim,
            max_positions,
        } = super::checks::check(
            "rope_append_normed",
            [query, key, value],
            [key_cache, value_cache],
            self.cache_dtype,
            frequencies,
            positions,
            first,
            heads,
        )?;
        let (inverse_frequencies, head_dim) = (&frequencies.inverse_frequencies, 2 * half);
        expect(
            "rope_append_normed",
            "query norm",
            query_norm,
            self.weight_dtype,
            &[head_dim],
        )?;
        expect(
            "rope_append_normed",
            "key norm",
            key_norm,
            self.weight_dtype,
            &[head_dim],
        )?;
        let heads_total = heads.query + heads.key_value;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(QUERY, query)
                .buffer(KEY, key)
                .buffer(VALUE, value)
                .buffer(KEY_CACHE, key_cache)
                .buffer(VALUE_CACHE, value_cache)
                .buffer(QUERY_NORM, query_norm)
                .buffer(KEY_NORM, key_norm)
                .scalar(EPS, eps)
                .buffer(INVERSE_FREQUENCIES, inverse_frequencies)
                .buffer(POSITIONS, positions)
                .scalar(FIRST, first as u32)
                .scalar(MAX_POSITIONS, max_positions as u32)
                .scalar(QUERY_HEADS, heads.query as u32)
                .scalar(KV_HEADS, heads.key_value as u32)
                .scalar(HEAD_DIM, head_dim as u32)
                .scalar(ATTENTION_SCALING, frequencies.attention_scaling)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid {
                    blocks: [heads_total.div_ceil(WARPS).max(1) as u32, 1, 1],
                    threads_per_block: [(WARPS * 32) as u32, 1, 1],
                    // A head staged per warp.
                    shared_memory_bytes: (WARPS * head_dim * 4) as u32,
                })
                .cost(
                    bytes_of(query.len() + 2 * kv_dim + half, DType::F32)
                        + bytes_of(2 * head_dim, self.weight_dtype)
                        + 4,
                    bytes_of(query.len(), DType::F32) + bytes_of(2 * kv_dim, self.cache_dtype),
                    10 * (query.len() + kv_dim) as u64,
                )
                .op_kind(OpKind::fused(&[
                    Primitive::RmsNorm,
                    Primitive::Rope,
                    Primitive::Copy,
                ])),
        )
    }
}
