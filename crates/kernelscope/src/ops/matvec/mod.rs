//! Matrix times vector, the decode-time projection: `out[n] = W[n, k] · x[k]`
//! with W in the checkpoint's dtype and f32 accumulation. It dominates a
//! decode step (every weight byte is read once per token), so the CPU
//! version splits rows across threads.

mod cpu;

use super::{Arguments, bytes_of, dimensions, expect, kernel_arguments, kernel_for, register_weight_kernels};
use crate::error::Result;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

use cpu::matvec;

kernel_arguments! { WEIGHT: "weight" Read, X: "x" Read, OUT: "out" Write, N: "n" U32, K: "k" U32 }

/// Registers `matvec_<dtype>`.
pub fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(registry, "matvec", matvec, include_str!("matvec.cu"));
}

/// The mat-vec op for one weight dtype.
#[derive(Clone, Debug)]
pub struct MatVec {
    kernel: Kernel,
    dtype: DType,
}

impl MatVec {
    /// The op for weights of `dtype` on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, dtype: DType) -> Result<Self> {
        Ok(MatVec {
            kernel: kernel_for(registry, device, "matvec", dtype)?,
            dtype,
        })
    }

    /// `out[n] = weight[n, k] · x[k]`.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        weight: &Buffer,
        x: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        let [n, k] = dimensions("matvec", "weight", weight)?;
        expect("matvec", "weight", weight, self.dtype, &[n, k])?;
        expect("matvec", "input", x, DType::F32, &[k])?;
        expect("matvec", "output", out, DType::F32, &[n])?;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(WEIGHT, weight)
                .buffer(X, x)
                .buffer(OUT, out)
                .scalar(N, n as u32)
                .scalar(K, k as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid::linear(n * 32, 256))
                .cost(
                    bytes_of(n * k, self.dtype) + bytes_of(n + k, DType::F32),
                    2 * (n * k) as u64,
                )
                .op_kind(OpKind::MatVec),
        )
    }
}
