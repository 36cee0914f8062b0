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
        self.encode_in(encoder, input, out, None)
    }

    /// [`encode`](Self::encode) in `blocks` blocks of [`THREADS`] (each
    /// thread looping over the rest), or, where `None`, enough blocks for
    /// every thread to read one step of four 16-byte loads.
    pub fn encode_in(
        &self,
        encoder: &mut CommandEncoder,
        input: &Buffer,
        out: &Buffer,
        blocks: Option<usize>,
    ) -> Result<()> {
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
                // Four 16-byte loads per thread per step.
                .grid(LaunchGrid::linear(
                    blocks.unwrap_or_else(|| words.div_ceil(16)).clamp(1, 1 << 20),
                    THREADS,
                ))
                .cost(input.byte_len() as u64, 0, 0)
                .op_kind(OpKind::Copy),
        )
    }
}

/// Threads of a block of the read probe.
pub const THREADS: u32 = 256;

/// The grids the probe tries on a GPU of `multiprocessors`: 4, 8 and 16
/// blocks of [`THREADS`] on each (threads looping over the buffer), and one
/// block for every step of every thread (`None`). A ceiling is the best the
/// device does, and which grid gives it is the GPU's to say: the one-step
/// grid had read 4,247-4,308 GB/s on an H200 where Triton read 4,434-4,502
/// (the lease); on the H200 of docs/PERF.md's run AE it won, 2.4 %
/// above the best of Triton, torch and a hand-written read.
fn candidate_grids(multiprocessors: Option<u32>) -> Vec<Option<usize>> {
    let mut grids: Vec<Option<usize>> = multiprocessors
        .map(|count| [4, 8, 16].iter().map(|per| Some(per * count as usize)).collect())
        .unwrap_or_default();
    grids.push(None);
    grids
}

#[cfg(test)]
mod tests {
    /// A GPU's candidates scale with its multiprocessors and end with the
    /// one-step grid; the CPU has only that one (it has no grid).
    #[test]
    fn the_candidate_grids_follow_the_multiprocessors() {
        assert_eq!(
            super::candidate_grids(Some(132)),
            [Some(528), Some(1056), Some(2112), None]
        );
        assert_eq!(
            super::candidate_grids(Some(7)),
            [Some(28), Some(56), Some(112), None]
        );
        assert_eq!(super::candidate_grids(None), [None]);
    }
}

/// The read probe's rate and the grid that gave it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadRate {
    /// GB/s of bytes read.
    pub gbps: f64,
    /// The grid, in words ("1056 blocks of 256 threads"), where the probe
    /// chose among several (a GPU); `None` on the CPU, which has no grid.
    pub grid: Option<String>,
}

/// Measures how fast `device` reads memory, in GB/s of bytes read, as the
/// best of `repetitions` timed reads of `bytes` bytes in each candidate grid,
/// timed as every ceiling probe is (`ops::probe_timing`).
pub fn measure_read_bandwidth(device: &Device, bytes: usize, repetitions: usize) -> Result<f64> {
    Ok(measure_read_rate(device, bytes, repetitions)?.gbps)
}

/// [`measure_read_bandwidth`], with the grid that read fastest.
pub fn measure_read_rate(device: &Device, bytes: usize, repetitions: usize) -> Result<ReadRate> {
    let registry = crate::runtime::KernelRegistry::of(register);
    let read = StreamRead::new(&registry, device)?;
    let words = bytes.div_ceil(4).max(1);
    // Any distinct words do; the index is cut to 32 bits on purpose.
    let pattern: Vec<u32> = (0..words)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761))
        .collect();
    let input = device.buffer_from_slice(&pattern, &[words])?;
    let out = device.alloc(DType::U32, &[1])?;
    let multiprocessors = device.capabilities().multiprocessors;
    let mut best = ReadRate {
        gbps: 0.0,
        grid: None,
    };
    for blocks in candidate_grids(multiprocessors) {
        let seconds = super::timing::best_seconds(device, "read_bandwidth", repetitions, |encoder| {
            read.encode_in(encoder, &input, &out, blocks)
        })?;
        let gbps = (words * 4) as f64 / seconds / 1e9;
        if gbps > best.gbps {
            let blocks = blocks.unwrap_or_else(|| words.div_ceil(16)).clamp(1, 1 << 20);
            best = ReadRate {
                gbps,
                grid: multiprocessors.map(|_| format!("{blocks} blocks of {THREADS} threads")),
            };
        }
    }
    Ok(best)
}
