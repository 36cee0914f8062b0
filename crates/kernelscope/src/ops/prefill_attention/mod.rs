//! Causal attention of a prefill chunk: each of the chunk's query rows (RoPE
//! applied) attends to the cached positions up to its own, which the chunk's
//! keys and values were appended to first, so the rows see the history
//! before the chunk and the chunk's rows up to theirs. Flash-attention
//! style on CUDA (tiles in shared memory, online softmax, no rows ×
//! positions scores anywhere), GQA-aware; the output in the dtype of the
//! GEMM that reads it (o_proj's input: the weights' dtype). With a bf16
//! cache and a head dim of 64 or 128 it runs on tensor cores (queries and
//! softmax weights rounded to bf16, as FlashAttention does); otherwise on
//! CUDA cores in f32.

mod arguments;
mod cpu;
pub(crate) use arguments::{
    ARGUMENTS, DIM, FIRST, KEY_CACHE, KV_HEADS, MAX_POSITIONS, OUT, POSITIONS, QUERY, QUERY_HEADS, ROWS,
    TILE_KEYS, TILE_ROWS, VALUE_CACHE,
};
use arguments::{TENSOR_CORE_DIMS, TENSOR_CORE_TILE, THREADS};

use super::attention::Heads;
use super::{
    Arguments, WEIGHT_DTYPES, bytes_of, expect_indices, expect_kv_caches, expect_rows, kv_caches_aligned,
    rows_of,
};
use crate::error::{Error, Result};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

use cpu::prefill_attention;

/// Registers `prefill_attention_<cache dtype>_<output dtype>`.
pub fn register(registry: &mut KernelRegistry) {
    macro_rules! register {
        ($($cache:ty, $out:ty, $name:literal);+ $(;)?) => {$(
            registry.register_cpu($name, prefill_attention::<$cache, $out>);
        )+};
    }
    use half::{bf16, f16};
    register!(
        f32, f32, "prefill_attention_f32_f32";
        f32, f16, "prefill_attention_f32_f16";
        f32, bf16, "prefill_attention_f32_bf16";
        f16, f32, "prefill_attention_f16_f32";
        f16, f16, "prefill_attention_f16_f16";
        f16, bf16, "prefill_attention_f16_bf16";
        bf16, f32, "prefill_attention_bf16_f32";
        bf16, f16, "prefill_attention_bf16_f16";
        bf16, bf16, "prefill_attention_bf16_bf16";
    );
    // The tensor-core kernels for bf16 caches compute what the reference does.
    register!(
        bf16, f32, "prefill_attention_tc64_bf16_f32";
        bf16, f16, "prefill_attention_tc64_bf16_f16";
        bf16, bf16, "prefill_attention_tc64_bf16_bf16";
        bf16, f32, "prefill_attention_tc128_bf16_f32";
        bf16, f16, "prefill_attention_tc128_bf16_f16";
        bf16, bf16, "prefill_attention_tc128_bf16_bf16";
    );
    let source: std::sync::Arc<str> = super::cuda_source(include_str!("prefill_attention.cu")).into();
    for cache in WEIGHT_DTYPES {
        for out in WEIGHT_DTYPES {
            registry.register_cuda_source(&format!("prefill_attention_{cache}_{out}"), source.clone());
            // Named last by its output's dtype, as the report grouped it
            // before kernels declared formats.
            registry.register_format(&format!("prefill_attention_{cache}_{out}"), out.name());
        }
    }
    for dim in TENSOR_CORE_DIMS {
        for out in WEIGHT_DTYPES {
            registry.register_cuda_source(&format!("prefill_attention_tc{dim}_bf16_{out}"), source.clone());
            registry.register_format(&format!("prefill_attention_tc{dim}_bf16_{out}"), out.name());
        }
    }
}

/// Query rows and cached positions one block holds in shared memory for a
/// head dimension: 16 × 32 up to 128 (41 KiB at 128), 8 × 16 beyond.
fn tiles(dim: usize) -> (usize, usize) {
    if dim <= 128 { (16, 32) } else { (8, 16) }
}

/// The prefill-attention op for one cache dtype and output dtype.
#[derive(Clone, Debug)]
pub struct PrefillAttention {
    kernel: Kernel,
    /// With a bf16 cache: the tensor-core kernels for head dims 64 and 128.
    tensor_core: Option<[Kernel; 2]>,
    cache_dtype: DType,
    out_dtype: DType,
}

impl PrefillAttention {
    /// The op reading caches of `cache_dtype` and writing `out_dtype`
    /// (each f32, f16 or bf16) on `device`.
    pub fn new(
        registry: &KernelRegistry,
        device: &Device,
        cache_dtype: DType,
        out_dtype: DType,
    ) -> Result<Self> {
        let name = format!("prefill_attention_{cache_dtype}_{out_dtype}");
        if !WEIGHT_DTYPES.contains(&cache_dtype) || !WEIGHT_DTYPES.contains(&out_dtype) {
            return Err(Error::KernelMissing {
                name,
                backend: device.backend(),
                workaround: "the KV cache and the output are f32, f16 or bf16".into(),
                remedies: &[],
            });
        }
        let kernel = registry.kernel(device, &name)?;
        let tensor_core = if cache_dtype == DType::BF16 {
            let [small, large] = TENSOR_CORE_DIMS;
            let load =
                |dim: usize| registry.kernel(device, &format!("prefill_attention_tc{dim}_bf16_{out_dtype}"));
            Some([load(small)?, load(large)?])
        } else {
            None
        };
        Ok(PrefillAttention {
            kernel,
            tensor_core,
            cache_dtype,
            out_dtype,
        })
    }

    /// `out[r, h] = softmax(q[r, h] · K[0..=pos_r, g(h)]ᵀ / sqrt(d)) ·
    /// V[0..=pos_r, g(h)]` for every row r of `query` (f32 `[rows, heads.query,
    /// dim]`) with `pos_r = positions[first + r]`. `context_end` (the last
    /// position + 1, known to the host) sizes the declared bytes.
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        query: &Buffer,
        key_cache: &Buffer,
        value_cache: &Buffer,
        positions: &Buffer,
        first: usize,
        heads: Heads,
        context_end: usize,
        out: &Buffer,
    ) -> Result<()> {
        let (rows, max_positions) =
            self.check_operands(query, key_cache, value_cache, positions, first, heads, out)?;
        let (tile_rows, tile_keys) = tiles(heads.dim);
        let (kernel, grid) = self.kernel_and_grid(heads, rows, kv_caches_aligned(key_cache, value_cache));
        let (kv_dim, q_dim) = (heads.key_value * heads.dim, heads.query * heads.dim);
        let cache_bytes = self.cache_dtype.size_in_bytes();
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(QUERY, query)
                .buffer(KEY_CACHE, key_cache)
                .buffer(VALUE_CACHE, value_cache)
                .buffer(POSITIONS, positions)
                .buffer(OUT, out)
                .scalar(FIRST, first as u32)
                .scalar(ROWS, rows as u32)
                .scalar(QUERY_HEADS, heads.query as u32)
                .scalar(KV_HEADS, heads.key_value as u32)
                .scalar(DIM, heads.dim as u32)
                .scalar(MAX_POSITIONS, max_positions as u32)
                .scalar(TILE_ROWS, tile_rows as u32)
                .scalar(TILE_KEYS, tile_keys as u32)
                .dispatch(kernel)?
                .grid(grid)
                .cost(
                    (2 * context_end * kv_dim * cache_bytes) as u64 + bytes_of(rows * q_dim, DType::F32),
                    bytes_of(rows * q_dim, self.out_dtype),
                    4 * (heads.query * heads.dim) as u64 * attended(rows, context_end),
                )
                // Replayed at another context, every row attends that many
                // more positions, and one more cached row is read.
                .cost_per_position(
                    context_end as u64,
                    (2 * kv_dim * cache_bytes) as u64,
                    4 * (heads.query * heads.dim * rows) as u64,
                )
                .op_kind(OpKind::Attention),
        )
    }

    /// Checks every operand; returns the query's rows and the caches' positions.
    #[allow(clippy::too_many_arguments)]
    fn check_operands(
        &self,
        query: &Buffer,
        key_cache: &Buffer,
        value_cache: &Buffer,
        positions: &Buffer,
        first: usize,
        heads: Heads,
        out: &Buffer,
    ) -> Result<(usize, usize)> {
        const OP: &str = "prefill_attention";
        heads.check(OP)?;
        let kv_dim = heads.key_value * heads.dim;
        let max_positions = expect_kv_caches(OP, key_cache, value_cache, self.cache_dtype, kv_dim)?;
        let rows = rows_of(OP, "query", query, heads.query * heads.dim)?;
        let row = [heads.query, heads.dim];
        expect_rows(OP, "query", query, DType::F32, rows, &row)?;
        expect_rows(OP, "output", out, self.out_dtype, rows, &row)?;
        expect_indices(OP, "positions", positions, first, rows)?;
        Ok((rows, max_positions))
    }

    /// The tensor-core kernel where the head dim has one and the caches are
    /// `aligned` for its 16-byte loads, else the general one; with its grid
    /// over `rows`.
    fn kernel_and_grid(&self, heads: Heads, rows: usize, aligned: bool) -> (&Kernel, LaunchGrid) {
        let tensor_core = self.tensor_core.as_ref().filter(|_| aligned).and_then(|kernels| {
            TENSOR_CORE_DIMS
                .iter()
                .position(|&dim| dim == heads.dim)
                .map(|i| &kernels[i])
        });
        match tensor_core {
            Some(kernel) => (
                kernel,
                LaunchGrid {
                    blocks: [rows.div_ceil(TENSOR_CORE_TILE) as u32, heads.query as u32, 1],
                    threads_per_block: [THREADS, 1, 1],
                    // Keys and values, each [64][dim + 8] bf16.
                    shared_memory_bytes: (2 * 2 * TENSOR_CORE_TILE * (heads.dim + 8)) as u32,
                },
            ),
            None => {
                let (tile_rows, tile_keys) = tiles(heads.dim);
                let shared_floats =
                    tile_rows * heads.dim + tile_keys * (heads.dim + 1) + tile_keys * heads.dim;
                (
                    &self.kernel,
                    LaunchGrid {
                        blocks: [rows.div_ceil(tile_rows) as u32, heads.query as u32, 1],
                        threads_per_block: [THREADS, 1, 1],
                        shared_memory_bytes: (shared_floats * 4) as u32,
                    },
                )
            }
        }
    }
}

/// The positions attended by a chunk of `rows` consecutive positions ending
/// at `context_end` (the engine's prefill), which the host knows without
/// reading the positions. Rows at repeated or scattered positions can
/// attend fewer than the closed form's subtraction removes, so it
/// saturates, and every row attends at least one.
fn attended(rows: usize, context_end: usize) -> u64 {
    ((rows * context_end) as u64)
        .saturating_sub((rows * rows.saturating_sub(1) / 2) as u64)
        .max(rows as u64)
}
