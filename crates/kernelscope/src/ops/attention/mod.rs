//! Decode attention: one query position against the KV cache up to and
//! including the current position (causal), grouped-query heads, softmax in
//! f32, scale `1/sqrt(head_dim)`, the cache in f32, f16 or bf16. The cached
//! positions are split across blocks (flash-decoding) and the splits merged
//! by a second kernel, so the context is bounded by memory only and a few
//! heads still fill the GPU; nothing is kept per position. Heads of up to
//! 128 elements (a multiple of one 16-byte load) in groups of up to 8 take
//! the vector kernels, which keep several 16-byte loads per lane in flight
//! and, where a short cache gives few splits, spread each group's query
//! heads over more blocks; other geometries take the generic kernel.

mod arguments;
pub(crate) use arguments::{combine, combine_quantized};
mod cpu;
pub(crate) mod rope;
pub(crate) use arguments::{
    ARGUMENTS, DIM, INDEX, KEY_CACHE, KV_HEADS, MAX_POSITIONS, PARTIALS, POSITION_SLOT, QUERY, QUERY_HEADS,
    SPLITS, VALUE_CACHE,
};
use arguments::{
    COMBINE_THREADS, MAX_GROUP, MAX_HEAD_DIM, MIN_POSITIONS_PER_SPLIT, SPLIT_THREADS, TARGET_BLOCKS,
    VECTOR_DIMS, VECTOR_GROUPS, VECTOR_THREADS,
};

use super::{Arguments, WEIGHT_DTYPES, bytes_of, expect, expect_kv_caches, expect_slot, kv_caches_aligned};
use crate::error::{Error, Result};
use crate::runtime::{
    Buffer, CommandEncoder, DType, Device, Dispatch, Kernel, KernelRegistry, LaunchGrid, OpKind,
};

use cpu::{attention_combine, attention_combine_q8, attention_rope_split, attention_split};

use combine::{
    DIM as COMBINE_DIM, OUT as COMBINE_OUT, PARTIALS as COMBINE_PARTIALS, QUERY_HEADS as COMBINE_QUERY_HEADS,
    SPLITS as COMBINE_SPLITS,
};

/// Registers `attention_split_<cache dtype>`, `attention_combine_f32` and
/// `attention_combine_q8`.
pub fn register(registry: &mut KernelRegistry) {
    // One source for every split kernel: the vector kernels
    // (vector_kernels.cu) and the RoPE-fused entries (rope.cu) instantiate
    // attention.cu's vector split.
    let source: std::sync::Arc<str> = super::cuda_source(&format!(
        "{}\n{}\n{}",
        include_str!("attention.cu"),
        include_str!("vector_kernels.cu"),
        include_str!("rope.cu")
    ))
    .into();
    for dtype in WEIGHT_DTYPES {
        // The generic kernel and every vector kernel compute what the
        // reference does.
        let generic = format!("attention_split_{dtype}");
        let vectors = VECTOR_DIMS
            .into_iter()
            .flat_map(|dim| VECTOR_GROUPS.map(|group| vector_name(dim, group, dtype)));
        for name in std::iter::once(generic).chain(vectors) {
            match dtype {
                DType::F16 => registry.register_cpu(&name, attention_split::<half::f16>),
                DType::BF16 => registry.register_cpu(&name, attention_split::<half::bf16>),
                _ => registry.register_cpu(&name, attention_split::<f32>),
            }
            registry.register_cuda_source(&name, source.clone());
            registry.register_format(&name, dtype.name());
        }
        // The RoPE-fused vector kernels compute what rope_append then the
        // split compute (`rope.rs`).
        for dim in VECTOR_DIMS {
            for group in VECTOR_GROUPS {
                let name = arguments::rope::kernel_name(dim, group, dtype);
                match dtype {
                    DType::F16 => registry.register_cpu(&name, attention_rope_split::<half::f16>),
                    DType::BF16 => registry.register_cpu(&name, attention_rope_split::<half::bf16>),
                    _ => registry.register_cpu(&name, attention_rope_split::<f32>),
                }
                registry.register_cuda_source(&name, source.clone());
                registry.register_format(&name, dtype.name());
            }
        }
    }
    // The quantized combine shares quantize_q8's helpers (quantized.cuh).
    let combine_source = super::cuda_source(&format!(
        "{}\n{}",
        include_str!("../quantized/linear/quantized.cuh"),
        include_str!("combine.cu")
    ));
    registry.register_cpu("attention_combine_f32", attention_combine);
    registry.register_cuda_source("attention_combine_f32", combine_source.clone());
    registry.register_format("attention_combine_f32", "f32");
    // No format, as its name says none (kernel_formats_tests): like
    // quantize_q8, its time falls under "other".
    registry.register_cpu("attention_combine_q8", attention_combine_q8);
    registry.register_cuda_source("attention_combine_q8", combine_source);
}

/// The vector kernel for a padded head dim, padded group and cache dtype.
fn vector_name(dim: usize, group: usize, dtype: DType) -> String {
    format!("attention_split_d{dim}_g{group}_{dtype}")
}

/// Head geometry of an attention layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heads {
    /// Query heads.
    pub query: usize,
    /// Key/value heads (divides `query`).
    pub key_value: usize,
    /// Elements per head.
    pub dim: usize,
}

impl Heads {
    /// Refuses what the kernels cannot run, naming it.
    pub(crate) fn check(self, op: &str) -> Result<()> {
        let problem = if self.query == 0 || self.key_value == 0 || self.dim == 0 {
            Some("a head count or the head dimension is 0".to_string())
        } else if !self.query.is_multiple_of(self.key_value) {
            Some(format!(
                "{} query heads do not divide over {} KV heads",
                self.query, self.key_value
            ))
        } else if self.query / self.key_value > MAX_GROUP {
            Some(format!(
                "{} query heads per KV head (at most {MAX_GROUP})",
                self.query / self.key_value
            ))
        } else if self.dim > MAX_HEAD_DIM {
            Some(format!("head dimension {} (at most {MAX_HEAD_DIM})", self.dim))
        } else {
            None
        };
        match problem {
            Some(problem) => Err(Error::KernelFailed {
                kernel: op.to_string(),
                message: format!("unsupported attention geometry: {problem}"),
            }),
            None => Ok(()),
        }
    }
}

/// The split decode-attention op for one cache dtype.
#[derive(Clone, Debug)]
pub struct Attention {
    split: Kernel,
    /// `vector[d][g]`: the vector kernel for `VECTOR_DIMS[d]`, `VECTOR_GROUPS[g]`.
    vector: Vec<Vec<Kernel>>,
    /// `vector_rope[d][g]`: the same with RoPE and the KV append fused in.
    vector_rope: Vec<Vec<Kernel>>,
    combine: Kernel,
    /// The combine that also quantizes its output for o_proj.
    combine_quantized: Kernel,
    cache_dtype: DType,
}

impl Attention {
    /// The op reading caches of `cache_dtype` (f32, f16 or bf16) on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, cache_dtype: DType) -> Result<Self> {
        if !WEIGHT_DTYPES.contains(&cache_dtype) {
            return Err(Error::KernelMissing {
                name: format!("attention_split_{cache_dtype}"),
                backend: device.backend(),
                workaround: format!("the KV cache holds f32, f16 or bf16, not {cache_dtype}"),
                remedies: &[],
            });
        }
        let table = |name: &dyn Fn(usize, usize, DType) -> String| {
            VECTOR_DIMS
                .iter()
                .map(|&dim| {
                    VECTOR_GROUPS
                        .iter()
                        .map(|&group| registry.kernel(device, &name(dim, group, cache_dtype)))
                        .collect::<Result<Vec<_>>>()
                })
                .collect::<Result<Vec<_>>>()
        };
        Ok(Attention {
            split: super::kernel_for(registry, device, "attention_split", cache_dtype)?,
            vector: table(&vector_name)?,
            vector_rope: table(&arguments::rope::kernel_name)?,
            combine: super::kernel_for(registry, device, "attention_combine", DType::F32)?,
            combine_quantized: registry.kernel(device, "attention_combine_q8")?,
            cache_dtype,
        })
    }

    /// The vector kernel for `heads` over these caches, when one fits (the
    /// head a whole number of 16-byte loads, both caches 16-byte aligned),
    /// with the query heads each of its blocks serves.
    fn vector_kernel(
        &self,
        heads: Heads,
        key_cache: &Buffer,
        value_cache: &Buffer,
    ) -> Option<(&Kernel, usize)> {
        let (dim, group, per_block) = self.vector_place(heads, key_cache, value_cache)?;
        Some((&self.vector[dim][group], per_block))
    }

    /// Where `heads` over these caches stand in the vector kernels' table
    /// (`[dim][group]`), with the query heads each block serves; `None`
    /// where no vector kernel fits.
    fn vector_place(
        &self,
        heads: Heads,
        key_cache: &Buffer,
        value_cache: &Buffer,
    ) -> Option<(usize, usize, usize)> {
        let per_load = 16 / self.cache_dtype.size_in_bytes();
        if !heads.dim.is_multiple_of(per_load) || !kv_caches_aligned(key_cache, value_cache) {
            return None;
        }
        let dim = VECTOR_DIMS.iter().position(|&padded| heads.dim <= padded)?;
        let max_positions = key_cache.shape().first().copied().unwrap_or(1);
        let per_block = Self::heads_per_block(heads, Self::splits(heads, max_positions));
        let group = VECTOR_GROUPS.iter().position(|&padded| per_block <= padded)?;
        Some((dim, group, per_block))
    }

    /// Query heads of a group one vector block serves: the whole group where
    /// the KV heads' splits already make [`TARGET_BLOCKS`] blocks; fewer at
    /// short context, where they would be a few blocks each walking its
    /// positions for every head of its group (ncu, qwen3-30b-a3b on an
    /// H200: 4 blocks of 236 registers a thread, 13 µs for a dozen positions).
    fn heads_per_block(heads: Heads, splits: usize) -> usize {
        let group = heads.query / heads.key_value.max(1);
        let blocks = (heads.key_value * splits).max(1);
        let least = group.div_ceil(TARGET_BLOCKS.div_ceil(blocks));
        // `least` is at most the group, so this is at most its padded size.
        VECTOR_GROUPS
            .into_iter()
            .find(|&padded| padded >= least)
            .unwrap_or(group)
    }

    /// The name of the split kernel [`encode`](Self::encode) launches for
    /// `heads` over these caches: a vector kernel, or the generic one.
    pub fn split_kernel_name(&self, heads: Heads, key_cache: &Buffer, value_cache: &Buffer) -> &str {
        self.vector_kernel(heads, key_cache, value_cache)
            .map_or(&self.split, |(kernel, _)| kernel)
            .name()
    }

    /// How many splits a cache of `max_positions` positions is divided
    /// into: enough blocks to fill a large GPU at long context, none with
    /// fewer than a few dozen positions at full length. Fixed by the cache's
    /// size (not the position), so a captured graph serves every position.
    pub fn splits(heads: Heads, max_positions: usize) -> usize {
        let by_length = max_positions.div_ceil(MIN_POSITIONS_PER_SPLIT);
        let by_blocks = (TARGET_BLOCKS / heads.key_value.max(1)).max(1);
        by_length.clamp(1, by_blocks)
    }

    /// Elements of the f32 scratch buffer the op needs for a cache of
    /// `max_positions` positions: each split's output, max and sum per head.
    pub fn scratch_len(heads: Heads, max_positions: usize) -> usize {
        Self::splits(heads, max_positions) * heads.query * (heads.dim + 2)
    }

    /// `out[h] = softmax(q[h] · K[0..=pos, g(h)]ᵀ / sqrt(d)) · V[0..=pos, g(h)]`
    /// with `pos = position_slot[index]` and `g(h) = h / (query / key_value)`,
    /// through `scratch` (f32, at least [`scratch_len`](Self::scratch_len)).
    /// `context` (positions attended, `pos + 1`) sizes the declared bytes and
    /// flops, which grow per position for replays at other positions.
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        query: &Buffer,
        key_cache: &Buffer,
        value_cache: &Buffer,
        position_slot: &Buffer,
        index: usize,
        heads: Heads,
        context: usize,
        scratch: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        self.encode_quantized(
            encoder,
            query,
            key_cache,
            value_cache,
            position_slot,
            index,
            heads,
            context,
            scratch,
            out,
            None,
        )
    }

    /// [`encode`](Self::encode), with the output also quantized into
    /// `quantized` where given (u8, `staged_bytes(query heads · dim)`:
    /// 8-bit blocks of 32 with their scales and scaled sums, as
    /// `quantize_q8` writes them) by the combine step itself, for a
    /// quantized o_proj's fused product to read with no quantize kernel of
    /// its own. The head dimension must then be a multiple of 32 (one block
    /// of a warp's 32 values).
    #[allow(clippy::too_many_arguments)]
    pub fn encode_quantized(
        &self,
        encoder: &mut CommandEncoder,
        query: &Buffer,
        key_cache: &Buffer,
        value_cache: &Buffer,
        position_slot: &Buffer,
        index: usize,
        heads: Heads,
        context: usize,
        scratch: &Buffer,
        out: &Buffer,
        quantized: Option<&Buffer>,
    ) -> Result<()> {
        if let Some(quantized) = quantized {
            if !heads.dim.is_multiple_of(32) {
                return Err(Error::ShapeMismatch {
                    context: "attention quantizing its output (blocks of 32 dims of a head)".into(),
                    expected: vec![heads.dim.next_multiple_of(32)],
                    found: vec![heads.dim],
                });
            }
            let values = heads.query * heads.dim;
            expect(
                "attention",
                "quantized output",
                quantized,
                DType::U8,
                &[super::quantized::linear::staged_bytes(values)],
            )?;
        }
        heads.check("attention")?;
        let kv_dim = heads.key_value * heads.dim;
        let max_positions = expect_kv_caches("attention", key_cache, value_cache, self.cache_dtype, kv_dim)?;
        expect("attention", "query", query, DType::F32, &[heads.query, heads.dim])?;
        expect("attention", "output", out, DType::F32, &[heads.query, heads.dim])?;
        expect_slot("attention", position_slot, index)?;
        let splits = Self::splits(heads, max_positions);
        let partials = Self::partials(heads, max_positions, scratch)?;
        let needed = partials.len();
        let cache_bytes = self.cache_dtype.size_in_bytes() as u64;
        let bytes_per_position = 2 * kv_dim as u64 * cache_bytes;
        let flops_per_position = 4 * (heads.query * heads.dim) as u64;
        let group = heads.query / heads.key_value;
        // Blocks along z each serve `per_block` of a group's query heads.
        let (split, threads, per_block) = match self.vector_kernel(heads, key_cache, value_cache) {
            Some((kernel, per_block)) => (kernel, VECTOR_THREADS, per_block),
            None => (&self.split, SPLIT_THREADS, group),
        };
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(QUERY, query)
                .buffer(KEY_CACHE, key_cache)
                .buffer(VALUE_CACHE, value_cache)
                .buffer(POSITION_SLOT, position_slot)
                .buffer(PARTIALS, &partials)
                .scalar(INDEX, index as u32)
                .scalar(QUERY_HEADS, heads.query as u32)
                .scalar(KV_HEADS, heads.key_value as u32)
                .scalar(DIM, heads.dim as u32)
                .scalar(MAX_POSITIONS, max_positions as u32)
                .scalar(SPLITS, splits as u32)
                .dispatch(split)?
                .grid(Self::split_grid(heads, splits, per_block, threads))
                .cost(
                    context as u64 * bytes_per_position + bytes_of(heads.query * heads.dim, DType::F32),
                    bytes_of(needed, DType::F32),
                    context as u64 * flops_per_position,
                )
                .cost_per_position(context as u64, bytes_per_position, flops_per_position)
                .op_kind(OpKind::Attention),
        )?;
        encoder.dispatch(self.combine(&partials, out, quantized, heads, splits)?)
    }

    /// The grid of a split kernel of `threads` a block: block (g, s, z)
    /// takes KV head g, split s, and `per_block` of the group's query heads
    /// from z · `per_block`, merging its warps' states in shared memory.
    fn split_grid(heads: Heads, splits: usize, per_block: usize, threads: u32) -> LaunchGrid {
        let group = heads.query / heads.key_value;
        let warps = (threads / 32) as usize;
        LaunchGrid {
            blocks: [
                heads.key_value as u32,
                splits as u32,
                group.div_ceil(per_block) as u32,
            ],
            threads_per_block: [threads, 1, 1],
            shared_memory_bytes: (warps * per_block.min(group) * (heads.dim + 2) * 4) as u32,
        }
    }

    /// The part of `scratch` the splits write their partial results to: an
    /// error unless it is f32 and holds [`scratch_len`](Self::scratch_len).
    fn partials(heads: Heads, max_positions: usize, scratch: &Buffer) -> Result<Buffer> {
        let needed = Self::scratch_len(heads, max_positions);
        if scratch.dtype() != DType::F32 || scratch.len() < needed {
            return Err(Error::ShapeMismatch {
                context: format!("attention scratch (f32, at least {needed} elements)"),
                expected: vec![needed],
                found: scratch.shape().to_vec(),
            });
        }
        scratch.slice(0, needed)
    }

    /// The dispatch that merges the `splits` partial results into `out`
    /// (and quantizes them into `quantized`, where given).
    fn combine(
        &self,
        partials: &Buffer,
        out: &Buffer,
        quantized: Option<&Buffer>,
        heads: Heads,
        splits: usize,
    ) -> Result<Dispatch> {
        let needed = partials.len();
        let values = heads.query * heads.dim;
        let arguments = match quantized {
            None => Arguments::new(combine::ARGUMENTS)
                .buffer(COMBINE_PARTIALS, partials)
                .buffer(COMBINE_OUT, out)
                .scalar(COMBINE_QUERY_HEADS, heads.query as u32)
                .scalar(COMBINE_DIM, heads.dim as u32)
                .scalar(COMBINE_SPLITS, splits as u32),
            Some(quantized) => Arguments::new(combine_quantized::ARGUMENTS)
                .buffer(combine_quantized::PARTIALS, partials)
                .buffer(combine_quantized::OUT, out)
                .buffer(combine_quantized::QUANTIZED, quantized)
                .scalar(combine_quantized::QUERY_HEADS, heads.query as u32)
                .scalar(combine_quantized::DIM, heads.dim as u32)
                .scalar(combine_quantized::SPLITS, splits as u32),
        };
        let kernel = if quantized.is_some() {
            &self.combine_quantized
        } else {
            &self.combine
        };
        let written = bytes_of(values, DType::F32)
            + quantized.map_or(0, |_| super::quantized::linear::staged_bytes(values) as u64);
        Ok(arguments
            .dispatch(kernel)?
            .grid(LaunchGrid {
                blocks: [heads.query as u32, heads.dim.div_ceil(32) as u32, 1],
                threads_per_block: [COMBINE_THREADS, 1, 1],
                shared_memory_bytes: 0,
            })
            .cost(bytes_of(needed, DType::F32), written, 3 * needed as u64)
            .op_kind(OpKind::Attention))
    }
}
