//! The gated MLP's activation: `out = silu(gate) * up`, `silu(g) = g / (1 + e^-g)`.

mod cpu;

use super::{Arguments, bytes_of, expect, kernel_arguments};
use crate::error::Result;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

kernel_arguments! { GATE: "gate" Read, UP: "up" Read, OUT: "out" Write, N: "n" U32 }

/// Registers `silu_mul_f32`.
pub fn register(registry: &mut KernelRegistry) {
    registry.register_cpu("silu_mul_f32", cpu::silu_mul);
    registry.register_cuda_source("silu_mul_f32", super::cuda_source(include_str!("silu_mul.cu")));
}

/// The SiLU-gate-multiply op.
#[derive(Clone, Debug)]
pub struct SiluMul {
    kernel: Kernel,
}

impl SiluMul {
    /// The op on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device) -> Result<Self> {
        Ok(SiluMul {
            kernel: super::kernel_for(registry, device, "silu_mul", DType::F32)?,
        })
    }

    /// `out[n] = silu(gate[n]) * up[n]`.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        gate: &Buffer,
        up: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        let n = gate.len();
        expect("silu_mul", "gate", gate, DType::F32, &[n])?;
        expect("silu_mul", "up", up, DType::F32, &[n])?;
        expect("silu_mul", "output", out, DType::F32, &[n])?;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(GATE, gate)
                .buffer(UP, up)
                .buffer(OUT, out)
                .scalar(N, n as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid::linear(n, 256))
                .cost(bytes_of(3 * n, DType::F32), 5 * n as u64)
                .op_kind(OpKind::SiluMul),
        )
    }
}
