//! Decode attention: one query position against the KV cache up to and
//! including the current position (causal), grouped-query heads, softmax in
//! f32, scale `1/sqrt(head_dim)`.

mod cpu;

use super::{bytes_of, expect};
use crate::error::Result;
use crate::runtime::{
    Buffer, CommandEncoder, DType, Device, Dispatch, Kernel, KernelRegistry, LaunchGrid, OpKind,
};

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
            Dispatch::new(&self.kernel)
                .read(query)
                .read(key_cache)
                .read(value_cache)
                .read(position_slot)
                .write(out)
                .param(index as u32)
                .param(heads.query as u32)
                .param(heads.key_value as u32)
                .param(heads.dim as u32)
                .param(max_positions as u32)
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
