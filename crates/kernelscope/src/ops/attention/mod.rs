//! Decode attention: one query position against the KV cache up to and
//! including the current position (causal), grouped-query heads, softmax in
//! f32, scale `1/sqrt(head_dim)`.

mod cpu;

use super::{Arguments, bytes_of, expect, kernel_arguments};
use crate::error::Result;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

kernel_arguments! {
    QUERY: "query" Read,
    KEY_CACHE: "key_cache" Read,
    VALUE_CACHE: "value_cache" Read,
    POSITION_SLOT: "position_slot" Read,
    OUT: "out" Write,
    INDEX: "index" U32,
    QUERY_HEADS: "query_heads" U32,
    KV_HEADS: "kv_heads" U32,
    DIM: "dim" U32,
    MAX_POSITIONS: "max_positions" U32,
}

/// Registers `attention_f32`.
pub fn register(registry: &mut KernelRegistry) {
    registry.register_cpu("attention_f32", cpu::attention);
    registry.register_cuda_source("attention_f32", super::cuda_source(include_str!("attention.cu")));
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

/// The decode-attention op.
#[derive(Clone, Debug)]
pub struct Attention {
    kernel: Kernel,
}

impl Attention {
    /// The op on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device) -> Result<Self> {
        Ok(Attention {
            kernel: super::kernel_for(registry, device, "attention", DType::F32)?,
        })
    }

    /// `out[h] = softmax(q[h] · K[0..=pos, g(h)]ᵀ / sqrt(d)) · V[0..=pos, g(h)]`
    /// with `pos = position_slot[index]` and `g(h) = h / (query / key_value)`.
    /// `context` (positions attended, `pos + 1`) is only used for the
    /// declared bytes and flops.
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
        out: &Buffer,
    ) -> Result<()> {
        let kv_dim = heads.key_value * heads.dim;
        let max_positions = key_cache.len() / kv_dim.max(1);
        expect("attention", "query", query, DType::F32, &[heads.query, heads.dim])?;
        expect(
            "attention",
            "key cache",
            key_cache,
            DType::F32,
            &[max_positions, kv_dim],
        )?;
        expect(
            "attention",
            "value cache",
            value_cache,
            DType::F32,
            &[max_positions, kv_dim],
        )?;
        expect("attention", "output", out, DType::F32, &[heads.query, heads.dim])?;
        let flops = 4 * (heads.query * heads.dim * context) as u64;
        let bytes = bytes_of(2 * context * kv_dim + 2 * heads.query * heads.dim, DType::F32);
        super::expect_slot("attention", position_slot, index)?;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(QUERY, query)
                .buffer(KEY_CACHE, key_cache)
                .buffer(VALUE_CACHE, value_cache)
                .buffer(POSITION_SLOT, position_slot)
                .buffer(OUT, out)
                .scalar(INDEX, index as u32)
                .scalar(QUERY_HEADS, heads.query as u32)
                .scalar(KV_HEADS, heads.key_value as u32)
                .scalar(DIM, heads.dim as u32)
                .scalar(MAX_POSITIONS, max_positions as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid {
                    blocks: [heads.query as u32, 1, 1],
                    threads_per_block: [128, 1, 1],
                    // The kernel keeps one score per cached position.
                    shared_memory_bytes: (max_positions * 4) as u32,
                })
                .cost(bytes, flops)
                .op_kind(OpKind::Attention),
        )
    }
}
