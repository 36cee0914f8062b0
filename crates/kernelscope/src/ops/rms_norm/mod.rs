//! RMS normalisation: `out = x / sqrt(mean(x²) + eps) * weight`, in f32.

mod cpu;

use super::{Arguments, bytes_of, expect, kernel_arguments, kernel_for, register_weight_kernels};
use crate::error::Result;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

use cpu::rms_norm;

kernel_arguments! { X: "x" Read, WEIGHT: "weight" Read, OUT: "out" Write, EPS: "eps" F32, N: "n" U32 }

/// Registers `rms_norm_<dtype>` (the dtype of the weight).
pub fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(registry, "rms_norm", rms_norm, include_str!("rms_norm.cu"));
}

/// The RMSNorm op for one weight dtype.
#[derive(Clone, Debug)]
pub struct RmsNorm {
    kernel: Kernel,
    dtype: DType,
}

impl RmsNorm {
    /// The op for weights of `dtype` on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, dtype: DType) -> Result<Self> {
        Ok(RmsNorm {
            kernel: kernel_for(registry, device, "rms_norm", dtype)?,
            dtype,
        })
    }

    /// `out[n] = x[n] / rms(x) * weight[n]`.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        weight: &Buffer,
        out: &Buffer,
        eps: f32,
    ) -> Result<()> {
        let n = x.len();
        expect("rms_norm", "input", x, DType::F32, &[n])?;
        expect("rms_norm", "weight", weight, self.dtype, &[n])?;
        expect("rms_norm", "output", out, DType::F32, &[n])?;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(X, x)
                .buffer(WEIGHT, weight)
                .buffer(OUT, out)
                .scalar(EPS, eps)
                .scalar(N, n as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid {
                    blocks: [1, 1, 1],
                    threads_per_block: [256, 1, 1],
                    shared_memory_bytes: 0,
                })
                .cost(
                    bytes_of(2 * n, DType::F32) + bytes_of(n, self.dtype),
                    4 * n as u64,
                )
                .op_kind(OpKind::RmsNorm),
        )
    }
}
