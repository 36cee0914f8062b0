//! RMSNorm, the gate and up projections and SiLU·mul in one dispatch:
//! `out[i] = silu(gate[i] · h) * (up[i] · h)` with `h = rmsnorm(x) *
//! norm_weight`. The gate and up outputs are never stored.

use super::cpu::norm_matvec_silu;
use super::{MOST_BLOCKS, check_normed_input};
use crate::error::Result;
use crate::ops::matvec::{cost, grid, with_core};
use crate::ops::{Arguments, bytes_of, dimensions, expect, kernel_for, register_weight_kernels};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, OpKind, Primitive};

pub(crate) use super::arguments::silu::{ARGUMENTS, EPS, GATE, K, N, NORM_WEIGHT, OUT, UP, X};

/// Registers `norm_matvec_silu_<dtype>`.
pub fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(
        registry,
        "norm_matvec_silu",
        norm_matvec_silu,
        &with_core(include_str!("silu.cu"))
    );
}

/// The fused RMSNorm, gate/up mat-vec and SiLU·mul op for one weight dtype.
#[derive(Clone, Debug)]
pub struct NormMatVecSiluMul {
    kernel: Kernel,
    dtype: DType,
}

impl NormMatVecSiluMul {
    /// The op for weights of `dtype` on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, dtype: DType) -> Result<Self> {
        Ok(NormMatVecSiluMul {
            kernel: kernel_for(registry, device, "norm_matvec_silu", dtype)?,
            dtype,
        })
    }

    /// `out[i] = silu(gate[i] · h) * (up[i] · h)`, `h = rmsnorm(x, eps) *
    /// norm_weight`, for gate and up `[n, k]`.
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        norm_weight: &Buffer,
        gate: &Buffer,
        up: &Buffer,
        out: &Buffer,
        eps: f32,
    ) -> Result<()> {
        const OP: &str = "norm_matvec_silu";
        let [n, k] = dimensions(OP, "gate", gate)?;
        expect(OP, "gate", gate, self.dtype, &[n, k])?;
        expect(OP, "up", up, self.dtype, &[n, k])?;
        check_normed_input(OP, x, norm_weight, self.dtype, k)?;
        expect(OP, "output", out, DType::F32, &[n])?;
        let (read, _, flops) = cost(2 * n, k, self.dtype);
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(X, x)
                .buffer(NORM_WEIGHT, norm_weight)
                .buffer(GATE, gate)
                .buffer(UP, up)
                .buffer(OUT, out)
                .scalar(N, n as u32)
                .scalar(K, k as u32)
                .scalar(EPS, eps)
                .dispatch(&self.kernel)?
                .grid(grid(n, MOST_BLOCKS, (4 * k) as u32))
                // Of the 2n mat-vec outputs only the n products are stored.
                .cost(
                    read + bytes_of(k, self.dtype),
                    bytes_of(n, DType::F32),
                    flops + 4 * k as u64 + 5 * n as u64,
                )
                .op_kind(OpKind::fused(&[
                    Primitive::RmsNorm,
                    Primitive::MatVec,
                    Primitive::SiluMul,
                ])),
        )
    }
}
