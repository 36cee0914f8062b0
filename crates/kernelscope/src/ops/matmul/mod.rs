//! Matrix times matrix, the prefill-time projection of several tokens at
//! once: `out[m, n] = x[m, k] · W[n, k]ᵀ`, W in the checkpoint's dtype, f32
//! accumulation. Each weight row is read once for all m tokens.

mod cpu;

use super::{bytes_of, expect, kernel_for, register_weight_kernels};
use crate::error::Result;
use crate::runtime::{
    Buffer, CommandEncoder, DType, Device, Dispatch, Kernel, KernelRegistry, LaunchGrid, OpKind,
};

use cpu::matmul;

/// Registers `matmul_<dtype>`.
pub fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(registry, "matmul", matmul, include_str!("matmul.cu"));
}

/// The mat-mul op for one weight dtype.
#[derive(Clone, Debug)]
pub struct MatMul {
    kernel: Kernel,
    dtype: DType,
}

impl MatMul {
    /// The op for weights of `dtype` on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, dtype: DType) -> Result<Self> {
        Ok(MatMul {
            kernel: kernel_for(registry, device, "matmul", dtype)?,
            dtype,
        })
    }

    /// `out[m, n] = x[m, k] · weight[n, k]ᵀ`.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        weight: &Buffer,
        x: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        let (n, k) = (weight.shape()[0], weight.shape().get(1).copied().unwrap_or(1));
        let m = x.len() / k.max(1);
        expect("matmul", "weight", weight, self.dtype, &[n, k])?;
        expect("matmul", "input", x, DType::F32, &[m, k])?;
        expect("matmul", "output", out, DType::F32, &[m, n])?;
        encoder.dispatch(
            Dispatch::new(&self.kernel)
                .read(weight)
                .read(x)
                .write(out)
                .param(m as u32)
                .param(n as u32)
                .param(k as u32)
                .grid(LaunchGrid::linear(m * n * 32, 256))
                .cost(
                    bytes_of(n * k, self.dtype) + bytes_of(m * (n + k), DType::F32),
                    2 * (m * n * k) as u64,
                )
                .op_kind(OpKind::MatMul),
        )
    }
}
