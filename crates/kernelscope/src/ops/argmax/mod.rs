//! Greedy token choice: the index of the largest logit (the first one on
//! ties, as `torch.argmax`), written to a u32 slot in device memory.

pub(crate) mod cpu;

use super::{Arguments, bytes_of, expect, kernel_arguments};
use crate::error::Result;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

kernel_arguments! { LOGITS: "logits" Read, OUT: "out" Write, N: "n" U32 }

/// Registers `argmax_f32`.
pub fn register(registry: &mut KernelRegistry) {
    registry.register_cpu("argmax_f32", cpu::argmax);
    registry.register_cuda_source("argmax_f32", super::cuda_source(include_str!("argmax.cu")));
}

/// The argmax op.
#[derive(Clone, Debug)]
pub struct Argmax {
    kernel: Kernel,
}

impl Argmax {
    /// The op on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device) -> Result<Self> {
        Ok(Argmax {
            kernel: super::kernel_for(registry, device, "argmax", DType::F32)?,
        })
    }

    /// `out[0] = argmax(logits)`.
    pub fn encode(&self, encoder: &mut CommandEncoder, logits: &Buffer, out: &Buffer) -> Result<()> {
        let n = logits.len();
        expect("argmax", "logits", logits, DType::F32, &[n])?;
        expect("argmax", "output", out, DType::U32, &[1])?;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(LOGITS, logits)
                .buffer(OUT, out)
                .scalar(N, n as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid::linear(1024, 1024))
                .cost(bytes_of(n, DType::F32) + 4, n as u64)
                .op_kind(OpKind::Argmax),
        )
    }
}
