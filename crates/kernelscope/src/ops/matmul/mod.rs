//! Matrix times matrix, the prefill-time projection of several tokens at
//! once: `out[m, n] = x[m, k] · W[n, k]ᵀ`, W in the checkpoint's dtype and x
//! in the same dtype (what a tensor-core GEMM takes; the op that produces x
//! narrows it), f32 accumulation and output. The CPU version is blocked for
//! cache and registers (see `cpu.rs`), and for bf16 on a CPU with AVX-512
//! BF16 runs on `vdpbf16ps` (`cpu_bf16.rs`); on CUDA it is a cuBLASLt GEMM,
//! with a plain reference kernel beside it.

mod cpu;
#[cfg(target_arch = "x86_64")]
pub(crate) mod cpu_bf16;
mod output;

#[cfg(target_arch = "x86_64")]
pub(crate) use cpu_bf16::uses_bf16_products;

use super::{
    Arguments, bytes_of, dimensions, expect, expect_rows, kernel_for, register_weight_kernels, rows_of,
};
use crate::error::Result;
use crate::runtime::{
    Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, LibraryCall, OpKind,
};

use cpu::matmul;

// The CUDA backend reads a GEMM's arguments itself, so their one list is
// the runtime's; the CPU reference and matmul.cu take the same.
pub(crate) use crate::runtime::library::gemm::{ARGUMENTS, K, M, N, OUT, WEIGHT, X};

/// Registers `matmul_<dtype>`: the CPU reference, and on CUDA a cuBLASLt
/// GEMM (tensor cores for f16/bf16) taking the same arguments.
pub fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(registry, "matmul", matmul, include_str!("matmul.cu"));
    for dtype in super::WEIGHT_DTYPES {
        registry.register_cuda_library(&format!("matmul_{dtype}"), LibraryCall::Gemm { dtype });
    }
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
                    bytes_of(k * (n + m), self.dtype),
                    bytes_of(m * n, DType::F32),
                    2 * (m * n * k) as u64,
                )
                .op_kind(OpKind::MatMul),
        )
    }
}
