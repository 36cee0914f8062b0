//! Streaming write: the probe of a device's memory-write ceiling, the
//! other direction of the read probe (`stream_read`), so a kernel that
//! reads some bytes and writes others can be held to the floor time of
//! both. The kernel fills a buffer with a pattern the caller can check,
//! with the widest stores and the streaming hint.

mod arguments;
pub use arguments::pattern_word;
mod cpu;
pub use arguments::KERNEL_NAME;
pub(crate) use arguments::{ARGUMENTS, OUT, SEED, WORDS};

use crate::error::{Error, Result};
use crate::ops::Arguments;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

/// Registers the write probe's kernels.
pub fn register(registry: &mut KernelRegistry) {
    registry.register_cpu(KERNEL_NAME, cpu::stream_write);
    registry.register_cuda_source(
        KERNEL_NAME,
        crate::ops::cuda_source(include_str!("stream_write.cu")),
    );
}

/// The write probe, bound to a device's kernel.
#[derive(Clone, Debug)]
pub struct StreamWrite {
    kernel: Kernel,
}

impl StreamWrite {
    /// The op for `device`, from `registry`.
    pub fn new(registry: &KernelRegistry, device: &Device) -> Result<Self> {
        Ok(StreamWrite {
            kernel: registry.kernel(device, KERNEL_NAME)?,
        })
    }

    /// Encodes `out[i] = pattern_word(i, seed)` over u32 words (writes are
    /// dtype-blind, so any buffer of whole words will do).
    pub fn encode(&self, encoder: &mut CommandEncoder, out: &Buffer, seed: u32) -> Result<()> {
        if !out.byte_len().is_multiple_of(4) {
            return Err(Error::ShapeMismatch {
                context: "stream_write: output byte length must be a multiple of 4".into(),
                expected: vec![out.byte_len().next_multiple_of(4)],
                found: vec![out.byte_len()],
            });
        }
        let words = out.byte_len() / 4;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(OUT, &out.reinterpret(DType::U32)?)
                .scalar(WORDS, words as u64)
                .scalar(SEED, seed)
                .dispatch(&self.kernel)?
                // Enough blocks to fill any GPU; each thread loops over the rest.
                .grid(LaunchGrid::linear(words.div_ceil(4).clamp(1, 1 << 22), 256))
                .cost(0, out.byte_len() as u64, 0)
                .op_kind(OpKind::Copy),
        )
    }
}

/// Measures how fast `device` writes memory, in GB/s of bytes written, as
/// the best of `repetitions` timed fills of `bytes` bytes, each with a new
/// seed, timed as every ceiling probe is (`ops::probe_timing`).
pub fn measure_write_bandwidth(device: &Device, bytes: usize, repetitions: usize) -> Result<f64> {
    let registry = crate::runtime::KernelRegistry::of(register);
    let write = StreamWrite::new(&registry, device)?;
    let words = bytes.div_ceil(4).max(1);
    let out = device.alloc(DType::U32, &[words])?;
    let mut seed = 0u32;
    let best = super::timing::best_seconds(device, "write_bandwidth", repetitions, |encoder| {
        seed = seed.wrapping_add(1);
        write.encode(encoder, &out, seed)
    })?;
    Ok((words * 4) as f64 / best / 1e9)
}
