//! The gated MLP's activation: `out = silu(gate) * up`, `silu(g) = g / (1 + e^-g)`,
//! elementwise over any number of rows, computed in f32 and stored as f32 or
//! in the weights' dtype (the down projection's GEMM input). Kernels are
//! named by the output's dtype: `silu_mul_<out>`.

mod arguments;
mod cpu;
pub(crate) use arguments::{ARGUMENTS, GATE, N, OUT, UP};

use super::{Arguments, WEIGHT_DTYPES, bytes_of, expect_like, kernel_for, register_weight_kernels};
use crate::error::{Error, Result};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

use cpu::silu_mul;

/// Registers `silu_mul_<dtype>` (the dtype of the output).
pub fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(registry, "silu_mul", silu_mul, include_str!("silu_mul.cu"));
}

/// The SiLU-gate-multiply op for one output dtype.
#[derive(Clone, Debug)]
pub struct SiluMul {
    kernel: Kernel,
    out_dtype: DType,
}

impl SiluMul {
    /// The op on `device` writing `out_dtype` (f32, f16 or bf16; any other
    /// is [`Error::KernelMissing`]).
    pub fn new(registry: &KernelRegistry, device: &Device, out_dtype: DType) -> Result<Self> {
        if !WEIGHT_DTYPES.contains(&out_dtype) {
            return Err(Error::KernelMissing {
                name: format!("silu_mul_{out_dtype}"),
                backend: device.backend(),
                workaround: format!("silu_mul writes f32, f16 or bf16, not {out_dtype}"),
                remedies: &[],
            });
        }
        Ok(SiluMul {
            kernel: kernel_for(registry, device, "silu_mul", out_dtype)?,
            out_dtype,
        })
    }

    /// `out = silu(gate) * up` elementwise; `gate` and `up` are f32, `out` in
    /// the op's output dtype. `gate`'s shape is the op's (`[n]` or
    /// `[rows, n]`); `up` and `out` have it or are flat.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        gate: &Buffer,
        up: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        let n = gate.len();
        expect_like("silu_mul", "gate", gate, DType::F32, gate)?;
        expect_like("silu_mul", "up", up, DType::F32, gate)?;
        expect_like("silu_mul", "output", out, self.out_dtype, gate)?;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(GATE, gate)
                .buffer(UP, up)
                .buffer(OUT, out)
                .scalar(N, n as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid::linear(n, 256))
                .cost(
                    bytes_of(2 * n, DType::F32),
                    bytes_of(n, self.out_dtype),
                    5 * n as u64,
                )
                .op_kind(OpKind::SiluMul),
        )
    }
}
