//! o_proj streamed on CUDA (`streamed_add_norm_staged`, streamed.cuh): a
//! block a chunk of 32 Q4_K rows, every row's bulk copy issued as the block
//! starts and before it waits, x held in registers; the residual added and
//! staged for the MLP's norm as `matvec_add_<format>_q8_norm_stage` does
//! (chunked.cuh), with the same arguments. The attention combine before it
//! lets it launch once the combine has waited, so its weights arrive while
//! the combine runs.

use crate::error::Result;
use crate::quant::QuantFormat;
use crate::runtime::{Device, Kernel, KernelRegistry, LaunchGrid};

use super::streamed::{held_kernels, holding, streams_q4_k};

/// The streamed o_proj kernels, by the longest row (in values) each holds
/// x for: a lane holds 2 or 4 pairs of Q4_K sub-blocks of every row.
pub(super) const HELD_NORM_STAGE_KERNELS: [(&str, usize); 2] = [
    ("stream_add_q4_k_held2_norm_stage", 4096),
    ("stream_add_q4_k_held4_norm_stage", 8192),
];

/// Rows shorter than this keep the register loop, as q/k/v's do
/// (`streamed_rope`): llama-3-8b's o_proj (4,096 values) is the shape
/// measured.
const SHORTEST_STREAMED: usize = 2048;
/// Rows a block owns: one 8-bit block of the staged output.
const CHUNK_ROWS: usize = 32;
/// Threads of a block: 16 warps of two rows each (`NORM_STAGE_WARPS`).
const THREADS: u32 = 16 * 32;
/// Shared memory before the slots: the warps' barriers (128 bytes) and
/// the chunk's 32 sums.
const HEADER_BYTES: usize = 128 + CHUNK_ROWS * 4;

/// Q4_K's streamed o_proj kernels on a device that has bulk copies.
#[derive(Clone, Debug)]
pub(crate) struct StreamedNormStage {
    /// Each kernel with the longest row it holds x for, shortest first.
    held: Vec<(Kernel, usize)>,
    shared_limit: usize,
}

impl StreamedNormStage {
    /// The kernels, where `format` is Q4_K and `device` has bulk copies
    /// and says its multiprocessors and a block's shared memory; `None`
    /// otherwise (the register loop runs).
    pub(crate) fn new(
        registry: &KernelRegistry,
        device: &Device,
        format: QuantFormat,
    ) -> Result<Option<Self>> {
        let (Some(_), Some(shared_limit)) = (
            streams_q4_k(device, format),
            device.capabilities().shared_memory_per_block,
        ) else {
            return Ok(None);
        };
        Ok(Some(StreamedNormStage {
            held: held_kernels(
                registry,
                device,
                HELD_NORM_STAGE_KERNELS,
                "Q4_K o_proj is streamed",
            )?,
            shared_limit: shared_limit as usize,
        }))
    }

    /// The kernel and grid for `n` rows (whole chunks of 32) of `k` values
    /// in planar rows of `row_bytes`; `None` where the register loop runs
    /// (no kernel holds rows that long, or a chunk's rows do not fit).
    pub(crate) fn plan(&self, n: usize, k: usize, row_bytes: usize) -> Option<(&Kernel, LaunchGrid)> {
        let shared = shared_bytes(row_bytes);
        if k < SHORTEST_STREAMED || !n.is_multiple_of(CHUNK_ROWS) || shared > self.shared_limit {
            return None;
        }
        Some((
            holding(&self.held, k)?,
            LaunchGrid {
                blocks: [(n / CHUNK_ROWS) as u32, 1, 1],
                threads_per_block: [THREADS, 1, 1],
                shared_memory_bytes: shared as u32,
            },
        ))
    }
}

/// A block's shared memory: the header, then its 32 rows.
fn shared_bytes(row_bytes: usize) -> usize {
    HEADER_BYTES + CHUNK_ROWS * row_bytes
}

#[cfg(test)]
mod tests {
    use super::shared_bytes;

    /// llama-3-8b's o_proj (rows of 4,096 Q4_K values: 2,304 bytes in
    /// planes) takes 72.25 KiB a block, rows of 8,192 twice that: both fit
    /// an H100's or H200's 227 KiB.
    #[test]
    fn a_chunk_of_long_rows_fits_a_hopper_block() {
        assert_eq!(shared_bytes(2_304), 256 + 73_728);
        assert!(shared_bytes(4_608) <= 227 << 10);
    }
}
