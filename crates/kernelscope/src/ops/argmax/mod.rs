//! Greedy token choice: the index of the largest logit (the first one on
//! ties, as `torch.argmax`), written to a u32 slot in device memory.
//!
//! On CUDA it is one launch over many blocks: each block reduces a share of
//! the logits and the last block to finish merges the shares (a vocabulary
//! of 128,256 read by a single block took ~50 µs on an H200; read by ~60
//! blocks it is bandwidth-bound). The op owns the blocks' scratch, whose
//! counter the last block resets, so a captured graph can replay it.

mod arguments;
pub(crate) mod cpu;
pub(crate) use arguments::{ARGUMENTS, LOGITS, N, OUT, PARTIALS};
use arguments::{LOGITS_PER_BLOCK, MOST_BLOCKS, THREADS};

use super::{Arguments, bytes_of, expect};
use crate::error::Result;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

/// Registers `argmax_f32`.
pub fn register(registry: &mut KernelRegistry) {
    registry.register_cpu("argmax_f32", cpu::argmax);
    registry.register_cuda_source("argmax_f32", super::cuda_source(include_str!("argmax.cu")));
    registry.register_format("argmax_f32", "f32");
}

/// The argmax op.
#[derive(Clone, Debug)]
pub struct Argmax {
    kernel: Kernel,
    /// u32 `[1 + 2 · MOST_BLOCKS]`: the finished-block counter (0 between
    /// launches), then each block's best value (as bits) and its index.
    partials: Buffer,
}

impl Argmax {
    /// The op on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device) -> Result<Self> {
        Ok(Argmax {
            kernel: super::kernel_for(registry, device, "argmax", DType::F32)?,
            partials: device.buffer_from_slice(&[0u32; 1 + 2 * MOST_BLOCKS], &[1 + 2 * MOST_BLOCKS])?,
        })
    }

    /// `out[0] = argmax(logits)`.
    pub fn encode(&self, encoder: &mut CommandEncoder, logits: &Buffer, out: &Buffer) -> Result<()> {
        let n = logits.len();
        expect("argmax", "logits", logits, DType::F32, &[n])?;
        expect("argmax", "output", out, DType::U32, &[1])?;
        let blocks = n.div_ceil(LOGITS_PER_BLOCK).clamp(1, MOST_BLOCKS);
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(LOGITS, logits)
                .buffer(PARTIALS, &self.partials)
                .buffer(OUT, out)
                .scalar(N, n as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid {
                    blocks: [blocks as u32, 1, 1],
                    threads_per_block: [THREADS, 1, 1],
                    shared_memory_bytes: 0,
                })
                .cost(
                    bytes_of(n, DType::F32),
                    bytes_of(2 * blocks + 1, DType::U32) + 4,
                    n as u64,
                )
                .op_kind(OpKind::Argmax),
        )
    }
}
