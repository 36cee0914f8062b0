//! Matrix times matrix, the prefill-time projection of several tokens at
//! once: `out[m, n] = x[m, k] · W[n, k]ᵀ`, W in the checkpoint's dtype and x
//! in the same dtype (what a tensor-core GEMM takes; the op that produces x
//! narrows it), f32 accumulation and output. The CPU version is blocked for
//! cache and registers (see `cpu.rs`); the CUDA kernel is a plain reference,
//! to be replaced by a library GEMM.

mod cpu;

use super::{
    Arguments, bytes_of, dimensions, expect, expect_rows, kernel_arguments, kernel_for,
    register_weight_kernels, rows_of,
};
use crate::error::Result;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

use cpu::matmul;

kernel_arguments! {
    WEIGHT: "weight" Read,
    X: "x" Read,
    OUT: "out" Write,
    M: "m" U32,
    N: "n" U32,
    K: "k" U32,
}

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

    /// `out[m, n] = x[m, k] · weight[n, k]ᵀ`: x in the weight's dtype, `out`
    /// f32, m = `x.len() / k` (at least 1).
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        weight: &Buffer,
        x: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        let [n, k] = dimensions("matmul", "weight", weight)?;
        expect("matmul", "weight", weight, self.dtype, &[n, k])?;
        let m = rows_of("matmul", "input", x, k)?;
        expect_rows("matmul", "input", x, self.dtype, m, &[k])?;
        expect_rows("matmul", "output", out, DType::F32, m, &[n])?;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(WEIGHT, weight)
                .buffer(X, x)
                .buffer(OUT, out)
                .scalar(M, m as u32)
                .scalar(N, n as u32)
                .scalar(K, k as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid::linear(m * n * 32, 256))
                .cost(
                    bytes_of(k * (n + m), self.dtype) + bytes_of(m * n, DType::F32),
                    2 * (m * n * k) as u64,
                )
                .op_kind(OpKind::MatMul),
        )
    }
}
