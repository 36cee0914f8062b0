//! Streaming read: the probe of a device's memory-read ceiling. Decode reads
//! weights and barely writes, so its roofline is the rate memory can be
//! read, which a copy (half reads, half writes) understates. The kernel
//! streams a buffer with the widest loads and as many in flight as it can
//! and folds what it read with XOR into one word, so nothing is optimised
//! away and the result does not depend on how the work was split.

mod arguments;
mod cpu;
pub use arguments::KERNEL_NAME;
pub(crate) use arguments::{ARGUMENTS, INPUT, OUT, WORDS};

use crate::error::{Error, Result};
use crate::ops::Arguments;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

/// Registers the read probe's kernels.
pub fn register(registry: &mut KernelRegistry) {
    registry.register_cpu(KERNEL_NAME, cpu::stream_read);
    registry.register_cuda_source(
        KERNEL_NAME,
        crate::ops::cuda_source(include_str!("stream_read.cu")),
    );
}

/// The read probe, bound to a device's kernel.
#[derive(Clone, Debug)]
pub struct StreamRead {
    kernel: Kernel,
}

impl StreamRead {
    /// The op for `device`, from `registry`.
    pub fn new(registry: &KernelRegistry, device: &Device) -> Result<Self> {
        Ok(StreamRead {
            kernel: registry.kernel(device, KERNEL_NAME)?,
        })
    }

    /// Encodes `out[0] ^= XOR of every word of input` (u32 words: reads are
    /// dtype-blind, so any buffer of whole words will do).
    pub fn encode(&self, encoder: &mut CommandEncoder, input: &Buffer, out: &Buffer) -> Result<()> {
        if !input.byte_len().is_multiple_of(4) {
            return Err(Error::ShapeMismatch {
                context: "stream_read: input byte length must be a multiple of 4".into(),
                expected: vec![input.byte_len().next_multiple_of(4)],
                found: vec![input.byte_len()],
            });
        }
        if out.dtype() != DType::U32 || out.is_empty() {
            return Err(Error::ShapeMismatch {
                context: "stream_read out: one u32 word".into(),
                expected: vec![1],
                found: out.shape().to_vec(),
            });
        }
        let words = input.byte_len() / 4;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(INPUT, &input.reinterpret(DType::U32)?)
                .buffer(OUT, &out.slice(0, 1)?)
                .scalar(WORDS, words as u64)
                .dispatch(&self.kernel)?
                // Four 16-byte loads per thread per step; enough blocks to
                // fill any GPU several times over, each thread looping over
                // the rest.
                .grid(LaunchGrid::linear(words.div_ceil(16).clamp(1, 1 << 20), 256))
                .cost(input.byte_len() as u64, 0, 0)
                .op_kind(OpKind::Copy),
        )
    }
}

/// Measures how fast `device` reads memory, in GB/s of bytes read, as the
/// best of `repetitions` timed reads of `bytes` bytes, timed as every
/// ceiling probe is (`ops::probe_timing`).
pub fn measure_read_bandwidth(device: &Device, bytes: usize, repetitions: usize) -> Result<f64> {
    let registry = crate::runtime::KernelRegistry::of(register);
    let read = StreamRead::new(&registry, device)?;
    let words = bytes.div_ceil(4).max(1);
    // Any distinct words do; the index is cut to 32 bits on purpose.
    let pattern: Vec<u32> = (0..words)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761))
        .collect();
    let input = device.buffer_from_slice(&pattern, &[words])?;
    let out = device.alloc(DType::U32, &[1])?;
    let best = super::timing::best_seconds(device, "read_bandwidth", repetitions, |encoder| {
        read.encode(encoder, &input, &out)
    })?;
    Ok((words * 4) as f64 / best / 1e9)
}
