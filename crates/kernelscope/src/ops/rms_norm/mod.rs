//! RMS normalisation of each row: `out = x / sqrt(mean(x²) + eps) * weight`,
//! computed in f32 and stored as f32 (the decode path) or in the weight's
//! dtype (the input of a GEMM over a batch of rows).
//!
//! Kernels are named by both dtypes: `rms_norm_<weight>` writes f32 (the
//! name decode has always used), `rms_norm_<weight>_<out>` a narrowed output
//! (`rms_norm_bf16_bf16`, `rms_norm_f16_f16`, and `rms_norm_f32_bf16` for
//! the bf16 GEMM inputs of a model whose weights are quantized blocks).

mod arguments;
pub(crate) mod cpu;
pub(crate) use arguments::{ARGUMENTS, EPS, N, OUT, ROWS, WEIGHT, X};

use std::sync::Arc;

use super::{Arguments, bytes_of, expect, expect_rows, kernel_for, rows_of};
use crate::error::{Error, Result};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

use cpu::rms_norm;
use half::{bf16, f16};

/// Registers `rms_norm_<weight>` (f32 output), `rms_norm_<weight>_<weight>`
/// (output in the weight's dtype) and `rms_norm_f32_bf16`.
pub fn register(registry: &mut KernelRegistry) {
    registry.register_cpu("rms_norm_f32", rms_norm::<f32, f32>);
    registry.register_cpu("rms_norm_f16", rms_norm::<f16, f32>);
    registry.register_cpu("rms_norm_bf16", rms_norm::<bf16, f32>);
    registry.register_cpu("rms_norm_f16_f16", rms_norm::<f16, f16>);
    registry.register_cpu("rms_norm_bf16_bf16", rms_norm::<bf16, bf16>);
    registry.register_cpu("rms_norm_f32_bf16", rms_norm::<f32, bf16>);
    let source: Arc<str> = super::cuda_source(include_str!("rms_norm.cu")).into();
    for name in [
        "rms_norm_f32",
        "rms_norm_f16",
        "rms_norm_bf16",
        "rms_norm_f16_f16",
        "rms_norm_bf16_bf16",
        "rms_norm_f32_bf16",
    ] {
        registry.register_cuda_source(name, source.clone());
    }
    // Each reads the dtype its name ends in, the output's where there are
    // two (as the report grouped it before kernels declared formats).
    for (name, format) in [
        ("rms_norm_f32", "f32"),
        ("rms_norm_f16", "f16"),
        ("rms_norm_bf16", "bf16"),
        ("rms_norm_f16_f16", "f16"),
        ("rms_norm_bf16_bf16", "bf16"),
        ("rms_norm_f32_bf16", "bf16"),
    ] {
        registry.register_format(name, format);
    }
}

/// Threads per block for rows of `n`: a float4 per thread for the widest
/// rows (1024 threads for 4096), a single warp for short ones.
fn threads_for(n: usize) -> u32 {
    (n.div_ceil(4).next_multiple_of(32)).clamp(32, 1024) as u32
}

/// The RMSNorm op for one weight dtype and one output dtype.
#[derive(Clone, Debug)]
pub struct RmsNorm {
    kernel: Kernel,
    weight_dtype: DType,
    out_dtype: DType,
}

impl RmsNorm {
    /// The op for weights of `weight_dtype` on `device`, writing `out_dtype`:
    /// f32, the weight's own dtype, or bf16 from f32 weights. Any other
    /// output dtype is [`Error::KernelMissing`].
    pub fn new(
        registry: &KernelRegistry,
        device: &Device,
        weight_dtype: DType,
        out_dtype: DType,
    ) -> Result<Self> {
        let kernel = if out_dtype == DType::F32 {
            kernel_for(registry, device, "rms_norm", weight_dtype)?
        } else if out_dtype == weight_dtype || (weight_dtype, out_dtype) == (DType::F32, DType::BF16) {
            kernel_for(registry, device, &format!("rms_norm_{weight_dtype}"), out_dtype)?
        } else {
            return Err(Error::KernelMissing {
                name: format!("rms_norm_{weight_dtype}_{out_dtype}"),
                backend: device.backend(),
                workaround: format!(
                    "rms_norm writes f32, the weight's dtype ({weight_dtype}) or bf16 from f32 weights, not {out_dtype}"
                ),
                remedies: &[],
            });
        };
        Ok(RmsNorm {
            kernel,
            weight_dtype,
            out_dtype,
        })
    }

    /// `out[r, :] = x[r, :] / rms(x[r, :]) * weight` for every row r of `x`
    /// f32 `[rows, n]`, where n is the length of `weight` `[n]`; `out` is
    /// `[rows, n]` in the op's output dtype. Flat operands are read as rows.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        weight: &Buffer,
        out: &Buffer,
        eps: f32,
    ) -> Result<()> {
        let n = weight.len();
        expect("rms_norm", "weight", weight, self.weight_dtype, &[n])?;
        let rows = rows_of("rms_norm", "input", x, n)?;
        expect_rows("rms_norm", "input", x, DType::F32, rows, &[n])?;
        expect_rows("rms_norm", "output", out, self.out_dtype, rows, &[n])?;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(X, x)
                .buffer(WEIGHT, weight)
                .buffer(OUT, out)
                .scalar(EPS, eps)
                .scalar(N, n as u32)
                .scalar(ROWS, rows as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid {
                    blocks: [rows as u32, 1, 1],
                    threads_per_block: [threads_for(n), 1, 1],
                    shared_memory_bytes: 0,
                })
                .cost(
                    bytes_of(rows * n, DType::F32) + bytes_of(n, self.weight_dtype),
                    bytes_of(rows * n, self.out_dtype),
                    4 * (rows * n) as u64,
                )
                .op_kind(OpKind::RmsNorm),
        )
    }
}
