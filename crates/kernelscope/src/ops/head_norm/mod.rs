//! RMSNorm of each head of a query or key `[rows, heads, head_dim]`, in
//! place, by one `[head_dim]` weight shared by the heads: Qwen3's `q_norm`
//! and `k_norm`, applied after the projection and before RoPE. Kernels are
//! named by the weight's dtype (`head_norm_bf16`); the activations are f32.

mod arguments;
pub(crate) mod cpu;
pub(crate) use arguments::{ARGUMENTS, COUNT, EPS, HEAD_DIM, WEIGHT, X};
use arguments::{MOST_BLOCKS, WARPS};

use super::{Arguments, bytes_of, expect, kernel_for};
use crate::error::{Error, Result};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

use half::{bf16, f16};

/// Registers `head_norm_<weight>` for f32, f16 and bf16 weights.
pub fn register(registry: &mut KernelRegistry) {
    registry.register_cpu("head_norm_f32", cpu::head_norm::<f32>);
    registry.register_cpu("head_norm_f16", cpu::head_norm::<f16>);
    registry.register_cpu("head_norm_bf16", cpu::head_norm::<bf16>);
    let source: std::sync::Arc<str> = super::cuda_source(include_str!("head_norm.cu")).into();
    for name in ["head_norm_f32", "head_norm_f16", "head_norm_bf16"] {
        registry.register_cuda_source(name, source.clone());
    }
    registry.register_format("head_norm_f32", "f32");
    registry.register_format("head_norm_f16", "f16");
    registry.register_format("head_norm_bf16", "bf16");
}

/// The per-head RMSNorm for one weight dtype.
#[derive(Clone, Debug)]
pub struct HeadNorm {
    kernel: Kernel,
    weight_dtype: DType,
}

impl HeadNorm {
    /// The op for weights of `weight_dtype` on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, weight_dtype: DType) -> Result<Self> {
        Ok(HeadNorm {
            kernel: kernel_for(registry, device, "head_norm", weight_dtype)?,
            weight_dtype,
        })
    }

    /// Every `[head_dim]` head of `x` f32 (any shape whose length is a
    /// multiple of head_dim, the length of `weight`) normalised and scaled
    /// by `weight` in place.
    pub fn encode(&self, encoder: &mut CommandEncoder, x: &Buffer, weight: &Buffer, eps: f32) -> Result<()> {
        let head_dim = weight.len();
        expect("head_norm", "weight", weight, self.weight_dtype, &[head_dim])?;
        if x.dtype() != DType::F32 || head_dim == 0 || !x.len().is_multiple_of(head_dim) {
            return Err(Error::ShapeMismatch {
                context: format!(
                    "head_norm: the input must be f32 heads of {head_dim} (the weight's length), found {} {}",
                    x.len(),
                    x.dtype()
                ),
                expected: vec![head_dim],
                found: x.shape().to_vec(),
            });
        }
        let count = x.len() / head_dim;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(X, x)
                .buffer(WEIGHT, weight)
                .scalar(EPS, eps)
                .scalar(COUNT, count as u32)
                .scalar(HEAD_DIM, head_dim as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid {
                    blocks: [count.div_ceil(WARPS).clamp(1, MOST_BLOCKS) as u32, 1, 1],
                    threads_per_block: [(WARPS * 32) as u32, 1, 1],
                    shared_memory_bytes: 0,
                })
                .cost(
                    bytes_of(x.len(), DType::F32) + bytes_of(head_dim, self.weight_dtype),
                    bytes_of(x.len(), DType::F32),
                    4 * x.len() as u64,
                )
                .op_kind(OpKind::RmsNorm),
        )
    }
}
