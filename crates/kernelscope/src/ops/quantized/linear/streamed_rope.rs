//! q, k and v's products streamed on CUDA (`streamed_matvecs_rope_held_x`,
//! streamed.cuh): Q4_K rows brought into rings of shared memory by bulk
//! copies, a warp a pair of rows (a head's rows i and i + half, which lane
//! 0 rotates, or two value rows), x held in registers, RoPE and the KV
//! append in the stores as `matvecs_rope_<format>_q8_bf16` does them. The
//! first copies go out before the kernel waits for the norm before it, and
//! the norm lets it launch at the norm's start, so the rings fill while the
//! norm runs.

use crate::error::Result;
use crate::quant::QuantFormat;
use crate::runtime::{Device, Kernel, KernelRegistry};

use super::streamed::{StreamPlan, held_kernels, holding, stream_plan, streams_q4_k};

/// The streamed q/k/v kernels, by the longest row (in values) each holds x
/// for: a lane holds 2 or 4 pairs of Q4_K sub-blocks of every row.
pub(super) const HELD_ROPE_KERNELS: [(&str, usize); 2] = [
    ("stream_matvecs_rope_q4_k_held2_bf16", 4096),
    ("stream_matvecs_rope_q4_k_held4_bf16", 8192),
];

/// Rows shorter than this keep the register loop. Unlike gate/up's,
/// llama-3.2-1b's rows of 2,048 values stream: its q/k/v took 13.2 µs a
/// token less streamed (H200, docs/PERF.md run AW).
const SHORTEST_STREAMED: usize = 2048;

/// The arguments of the streamed q/k/v kernels (`streamed_kernels.cu`):
/// `matvecs_rope`'s, then the slots a warp keeps.
// matvecs_rope's positions fill the first arguments (a test checks they
// are the same), so those of this list go unused.
#[allow(dead_code)]
pub(crate) mod rope_arguments {
    crate::ops::kernel_arguments! {
        X: "x" Read, WEIGHT_A: "weight_a" Read, WEIGHT_B: "weight_b" Read, WEIGHT_C: "weight_c" Read,
        ROWS_A: "rows_a" U32, ROWS_B: "rows_b" U32, ROWS_C: "rows_c" U32, K: "k" U32,
        FIRST_ROW: "first_row" U32, QUERY: "query" ReadWrite, KEY_CACHE: "key_cache" ReadWrite,
        VALUE_CACHE: "value_cache" ReadWrite, INVERSE_FREQUENCIES: "inverse_frequencies" Read,
        POSITIONS: "positions" Read, FIRST: "first" U32, MAX_POSITIONS: "max_positions" U32,
        QUERY_HEADS: "query_heads" U32, KV_HEADS: "kv_heads" U32, HEAD_DIM: "head_dim" U32,
        ATTENTION_SCALING: "attention_scaling" F32, STAGES: "stages" U32
    }
}

/// Q4_K's streamed q/k/v kernels on a device that has bulk copies.
#[derive(Clone, Debug)]
pub(crate) struct StreamedQueryKeyValue {
    /// Each kernel with the longest row it holds x for, shortest first.
    held: Vec<(Kernel, usize)>,
    multiprocessors: u32,
}

impl StreamedQueryKeyValue {
    /// The kernels, where `format` is Q4_K and `device` has bulk copies and
    /// says how many multiprocessors it has; `None` otherwise (the register
    /// loop runs).
    pub(crate) fn new(
        registry: &KernelRegistry,
        device: &Device,
        format: QuantFormat,
    ) -> Result<Option<Self>> {
        let Some(multiprocessors) = streams_q4_k(device, format) else {
            return Ok(None);
        };
        Ok(Some(StreamedQueryKeyValue {
            held: held_kernels(registry, device, HELD_ROPE_KERNELS, "Q4_K q/k/v are streamed")?,
            multiprocessors,
        }))
    }

    /// The kernel and plan for `rows` rows of [q; k; v] (an even number:
    /// whole heads) of `k` values in planar rows of `row_bytes`, a warp's
    /// slot a pair of rows; `None` where the register loop runs.
    pub(crate) fn plan(&self, rows: usize, k: usize, row_bytes: usize) -> Option<(&Kernel, StreamPlan)> {
        if k < SHORTEST_STREAMED || !rows.is_multiple_of(2) {
            return None;
        }
        Some((
            holding(&self.held, k)?,
            stream_plan(rows / 2, 2 * row_bytes, self.multiprocessors)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::rope_arguments;
    use crate::ops::quantized::linear::arguments::matvecs_rope;

    /// The streamed kernels take matvecs_rope's arguments first, in order
    /// (their dispatch fills them by its positions), then their slots.
    #[test]
    fn the_streamed_list_begins_with_matvecs_ropes() {
        crate::runtime::arguments::assert_extends(
            rope_arguments::ARGUMENTS,
            matvecs_rope::ARGUMENTS,
            &["stages"],
        );
    }
}
