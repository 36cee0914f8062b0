//! The streamed products on CUDA (`streamed.cuh`, `streamed_kernels.cu`):
//! rings of rows in shared memory, filled by bulk asynchronous copies
//! (compute capability 9.0 and later), with x held in registers, so a row's
//! products read only weights. Q4_K's gate/up, a warp a row (llama-3-8b:
//! 22.9 µs where the register loop took 28.8), and the down projections of
//! Q4_K and Q6_K, two warps a row (13.0 against 17.3 µs, 20.4 against
//! 23.7; H200, `tools/gpu/quantized_bench`, the quantize kernel included).
//! docs/PERF.md has the measurements, and why the other products keep the
//! register loop.

use std::sync::Arc;

use crate::error::Result;
use crate::quant::QuantFormat;
use crate::runtime::{Device, Kernel, KernelRegistry, LaunchGrid};

use super::cuda::{cuda_source_with, quantized_kernel};

/// The streamed gate/up kernels, by the longest row (in values) each holds
/// x for: a lane holds 2 or 4 pairs of Q4_K sub-blocks (64 values each) of
/// every row.
const HELD_KERNELS: [(&str, usize); 2] = [("stream_silu_q4_k_held2", 4096), ("stream_silu_q4_k_held4", 8192)];
/// The same over an x o_proj staged before its norm, which they finish
/// (`norm_arguments`).
const HELD_NORM_KERNELS: [(&str, usize); 2] = [
    ("stream_silu_q4_k_held2_norm", 4096),
    ("stream_silu_q4_k_held4_norm", 8192),
];
/// Rows this short keep the register loop: llama-3.2-1b's gate/up (2,048
/// values) took 8.6-9.4 µs streamed against 8.6-8.9 in the engine (H200,
/// CUPTI), and decoded 0.6 % slower, though it measured faster alone.
const SHORTEST_STREAMED: usize = 2049;

/// The streamed down projections (`out += W · x`), each row split over two
/// warps: by format, the kernel and the longest row (in values) it holds x
/// for (2 or 4 units of 64 values a lane, two warps a row).
const SPLIT_KERNELS: [(QuantFormat, &str, usize); 4] = [
    (QuantFormat::Q4_K, "stream_add_q4_k_split2_held2", 8192),
    (QuantFormat::Q4_K, "stream_add_q4_k_split2_held4", 16384),
    (QuantFormat::Q6_K, "stream_add_q6_k_split2_held2", 8192),
    (QuantFormat::Q6_K, "stream_add_q6_k_split2_held4", 16384),
];
/// Rows this short keep the register loop: o_proj (4,096 values) streamed
/// with x held measured slower than it (7.5-7.9 against 6.7 µs, H200).
const SHORTEST_SPLIT: usize = 4097;

/// The arguments of the streamed down projections (`streamed_kernels.cu`).
pub(crate) mod add_arguments {
    crate::ops::kernel_arguments! {
        WEIGHT: "weight" Read, X: "x" Read, OUT: "out" ReadWrite, N: "n" U32, K: "k" U32, STAGES: "stages" U32
    }
}

/// The arguments of the streamed gate/up kernels (`streamed_kernels.cu`).
// gate/up's positions fill the first arguments (a test checks they are
// the same), so those of this list go unused.
#[allow(dead_code)]
pub(crate) mod arguments {
    crate::ops::kernel_arguments! {
        X: "x" Read, GATE: "gate" Read, UP: "up" Read, OUT: "out" Write, N: "n" U32, K: "k" U32,
        STAGES: "stages" U32
    }
}

/// The arguments of the streamed gate/up kernels that finish x's norm:
/// gate/up's, then x's blocks' sums of squares and the norm's epsilon.
// gate/up's positions fill the first arguments (a test checks they are
// the same), so those of this list go unused.
#[allow(dead_code)]
pub(crate) mod norm_arguments {
    crate::ops::kernel_arguments! {
        X: "x" Read, GATE: "gate" Read, UP: "up" Read, OUT: "out" Write, N: "n" U32, K: "k" U32,
        STAGES: "stages" U32, SQUARES: "squares" Read, EPS: "eps" F32
    }
}

/// Registers the streamed kernels on CUDA: Q4_K's gate/up, Q4_K's and
/// Q6_K's down, and `also` (Q4_K kernels of the same source, named by
/// their own modules: `streamed_rope`'s q/k/v, `streamed_norm_stage`'s
/// o_proj).
pub(super) fn register(registry: &mut KernelRegistry, also: &[(&'static str, usize)]) {
    let source: Arc<str> = cuda_source_with(include_str!("streamed_kernels.cu")).into();
    for (name, _) in HELD_KERNELS
        .into_iter()
        .chain(HELD_NORM_KERNELS)
        .chain(also.iter().copied())
    {
        registry.register_cuda_source(name, source.clone());
        registry.register_format(name, QuantFormat::Q4_K.name());
    }
    for (format, name, _) in SPLIT_KERNELS {
        registry.register_cuda_source(name, source.clone());
        registry.register_format(name, format.name());
    }
}

/// Shared memory the split kernels' rings aim for: one block of eight
/// two-warp groups a multiprocessor, two to eight rows each (llama-3-8b's
/// down: 13.0 µs in 126 KiB against 15.6 in 31 KiB, H200).
const SPLIT_BUDGET: usize = 200 << 10;
/// Warps a row of the split kernels.
const SPLIT: usize = 2;

/// The plan of a split kernel for `n` rows of `row_bytes` on a GPU of
/// `multiprocessors` whose blocks may take `shared_limit` bytes: the most
/// two-warp groups a block (8, 4, 2 or 1) whose two slots each fit, as
/// many blocks as fit at once, rows spread so no group takes more than one
/// over another. `None` where one group's two slots do not fit.
pub(crate) fn split_plan(
    n: usize,
    row_bytes: usize,
    multiprocessors: u32,
    shared_limit: usize,
) -> Option<StreamPlan> {
    let n = n.max(1);
    let (groups, stages, shared) = [8usize, 4, 2, 1].into_iter().find_map(|groups| {
        let most = (SPLIT_BUDGET.min(shared_limit) / (groups * row_bytes)).clamp(2, MOST_STAGES);
        (2..=most).rev().find_map(|stages| {
            let shared = split_shared_bytes(groups, stages, row_bytes);
            (shared <= shared_limit).then_some((groups, stages, shared))
        })
    })?;
    Some(spread(
        n,
        groups,
        groups * SPLIT * 32,
        shared,
        stages,
        multiprocessors,
    ))
}

/// The plan of `rows` rows over blocks of `threads` threads and `shared`
/// bytes, each `rings` rings (a warp's, or a group's) of `stages` slots: as
/// many blocks as fit at once on `multiprocessors`, and only as many rings
/// as keep the busiest one's rows as few as with all of them.
fn spread(
    rows: usize,
    rings: usize,
    threads: usize,
    shared: usize,
    stages: usize,
    multiprocessors: u32,
) -> StreamPlan {
    let most_rings = multiprocessors.max(1) as usize * blocks_per_multiprocessor(shared, threads) * rings;
    let rows_per_ring = rows.div_ceil(most_rings);
    let rings_needed = rows.div_ceil(rows_per_ring);
    StreamPlan {
        grid: LaunchGrid {
            blocks: [rings_needed.div_ceil(rings) as u32, 1, 1],
            threads_per_block: [threads as u32, 1, 1],
            shared_memory_bytes: shared as u32,
        },
        stages: stages as u32,
    }
}

/// Shared memory of a split kernel's block (`streamed_add_split`): the
/// slots' barriers, the warps' shares (two a warp), then the slots.
pub(crate) fn split_shared_bytes(groups: usize, stages: usize, row_bytes: usize) -> usize {
    barrier_bytes(groups, stages) + barrier_bytes(groups * SPLIT, 1) + groups * stages * row_bytes
}

/// Shared memory a block may take without opting in to more.
const SHARED_LIMIT: usize = 48 << 10;
/// Shared memory a block's slots aim for: two slots a warp when rows are
/// long, more when they are short (measured best of 40, 64 and 110 KiB).
const SLOT_BUDGET: usize = 40 << 10;
/// The most slots a warp keeps.
const MOST_STAGES: usize = 8;
/// Shared memory one streaming multiprocessor has for blocks, and what the
/// driver reserves a block (Hopper).
pub(crate) const SHARED_PER_MULTIPROCESSOR: usize = 227 << 10;
pub(crate) const SHARED_RESERVED_PER_BLOCK: usize = 1 << 10;
/// Threads one streaming multiprocessor runs at most.
const THREADS_PER_MULTIPROCESSOR: usize = 2048;

/// How a streamed product is launched: its grid (`shared_memory_bytes`
/// holding the barriers and slots) and the slots a warp keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StreamPlan {
    pub grid: LaunchGrid,
    pub stages: u32,
}

/// The plan for `rows` rows of `slot_bytes` each (every matrix's row) on a
/// GPU of `multiprocessors`: the most warps a block (8, 4 or 2) whose two
/// slots each fit in [`SHARED_LIMIT`], as many blocks as fit at once, and
/// the rows spread so no warp takes more than one row over the others.
/// `None` where not even two warps' two slots fit.
pub(crate) fn stream_plan(rows: usize, slot_bytes: usize, multiprocessors: u32) -> Option<StreamPlan> {
    let rows = rows.max(1);
    let (warps, stages, shared) = [8usize, 4, 2].into_iter().find_map(|warps| {
        let stages = (SLOT_BUDGET / (warps * slot_bytes)).clamp(2, MOST_STAGES);
        let shared = barrier_bytes(warps, stages) + warps * stages * slot_bytes;
        (shared <= SHARED_LIMIT).then_some((warps, stages, shared))
    })?;
    Some(spread(rows, warps, warps * 32, shared, stages, multiprocessors))
}

/// Blocks of `shared` bytes and `threads` threads one multiprocessor runs
/// at once (at least one).
fn blocks_per_multiprocessor(shared: usize, threads: usize) -> usize {
    (SHARED_PER_MULTIPROCESSOR / (shared + SHARED_RESERVED_PER_BLOCK))
        .min(THREADS_PER_MULTIPROCESSOR / threads)
        .max(1)
}

/// `streamed_barrier_bytes` of streamed.cuh: 8 bytes a slot, rounded to 128.
fn barrier_bytes(warps: usize, stages: usize) -> usize {
    (warps * stages * 8).div_ceil(128) * 128
}

/// The kernels `names` (each with the longest row it holds x for) on
/// `device`, or the error saying `what` is not done there.
pub(super) fn held_kernels(
    registry: &KernelRegistry,
    device: &Device,
    names: impl IntoIterator<Item = (&'static str, usize)>,
    what: &str,
) -> Result<Vec<(Kernel, usize)>> {
    names
        .into_iter()
        .map(|(name, longest)| {
            Ok((
                quantized_kernel(registry, device, name.to_string(), what)?,
                longest,
            ))
        })
        .collect()
}

/// The multiprocessors of `device` where Q4_K rows stream there: `format`
/// is Q4_K and the device has bulk copies and says how many
/// multiprocessors it has (the plans spread rows over them); `None` where
/// the register loop runs.
pub(super) fn streams_q4_k(device: &Device, format: QuantFormat) -> Option<u32> {
    let capabilities = device.capabilities();
    match (capabilities.bulk_copies, capabilities.multiprocessors, format) {
        (true, Some(multiprocessors), QuantFormat::Q4_K) => Some(multiprocessors),
        _ => None,
    }
}

/// The first of `held` (shortest first) that holds x for rows of `k`.
pub(super) fn holding(held: &[(Kernel, usize)], k: usize) -> Option<&Kernel> {
    held.iter()
        .find(|(_, longest)| k <= *longest)
        .map(|(kernel, _)| kernel)
}

/// Q4_K's streamed gate/up kernels on a device that has bulk copies.
#[derive(Clone, Debug)]
pub(crate) struct StreamedGateUp {
    /// Each kernel with the longest row it holds x for, shortest first.
    held: Vec<(Kernel, usize)>,
    /// The same finishing x's norm (`HELD_NORM_KERNELS`).
    held_norm: Vec<(Kernel, usize)>,
    multiprocessors: u32,
}

impl StreamedGateUp {
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
        let what = "Q4_K gate/up is streamed";
        Ok(Some(StreamedGateUp {
            held: held_kernels(registry, device, HELD_KERNELS, what)?,
            held_norm: held_kernels(registry, device, HELD_NORM_KERNELS, what)?,
            multiprocessors,
        }))
    }

    /// The kernel and plan for `n` rows of gate and up of `k` values in
    /// planar rows of `row_bytes`, or `None` where no kernel holds rows that
    /// long or their slots do not fit.
    /// The kernel is the one finishing x's norm where `finishes_norm` asks.
    pub(crate) fn plan(
        &self,
        n: usize,
        k: usize,
        row_bytes: usize,
        finishes_norm: bool,
    ) -> Option<(&Kernel, StreamPlan)> {
        if k < SHORTEST_STREAMED {
            return None;
        }
        let held = if finishes_norm {
            &self.held_norm
        } else {
            &self.held
        };
        Some((
            holding(held, k)?,
            stream_plan(n, 2 * row_bytes, self.multiprocessors)?,
        ))
    }
}

/// The streamed down projections of one format on a device with bulk
/// copies.
#[derive(Clone, Debug)]
pub(crate) struct StreamedDown {
    /// Each kernel with the longest row it holds x for, shortest first.
    held: Vec<(Kernel, usize)>,
    multiprocessors: u32,
    shared_limit: usize,
}

impl StreamedDown {
    /// The kernels of `format` where it has them (Q4_K, Q6_K) and `device`
    /// has bulk copies and says its multiprocessors and shared memory;
    /// `None` otherwise (the register loop runs).
    pub(crate) fn new(
        registry: &KernelRegistry,
        device: &Device,
        format: QuantFormat,
    ) -> Result<Option<Self>> {
        let capabilities = device.capabilities();
        let (true, Some(multiprocessors), Some(shared_limit)) = (
            capabilities.bulk_copies,
            capabilities.multiprocessors,
            capabilities.shared_memory_per_block,
        ) else {
            return Ok(None);
        };
        let kernels = SPLIT_KERNELS
            .iter()
            .filter(|(kernel_format, _, _)| *kernel_format == format)
            .map(|&(_, name, longest)| (name, longest));
        let held = held_kernels(registry, device, kernels, "down projections are streamed")?;
        Ok((!held.is_empty()).then_some(StreamedDown {
            held,
            multiprocessors,
            shared_limit: shared_limit as usize,
        }))
    }

    /// The kernel and plan for `n` rows of `k` values in planar rows of
    /// `row_bytes`, or `None` where the register loop runs.
    pub(crate) fn plan(&self, n: usize, k: usize, row_bytes: usize) -> Option<(&Kernel, StreamPlan)> {
        if k < SHORTEST_SPLIT {
            return None;
        }
        Some((
            holding(&self.held, k)?,
            split_plan(n, row_bytes, self.multiprocessors, self.shared_limit)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels finishing x's norm take gate/up's arguments first, in
    /// order (their dispatch fills them by gate/up's positions).
    #[test]
    fn the_norm_finishing_list_begins_with_gate_ups() {
        crate::runtime::arguments::assert_extends(
            norm_arguments::ARGUMENTS,
            arguments::ARGUMENTS,
            &["squares", "eps"],
        );
    }

    /// The plans the H200 measurements chose (docs/PERF.md): llama-3-8b's
    /// gate/up (14,336 rows of 2,304 bytes, each slot gate's and up's) in
    /// 717 blocks of four warps, llama-3.2-1b's (8,192 of 1,152) in 512 of
    /// eight, two slots a warp.
    #[test]
    fn the_plans_are_the_measured_ones() {
        let eight_b = stream_plan(14_336, 2 * 2_304, 132).unwrap();
        assert_eq!(eight_b.grid.blocks, [717, 1, 1]);
        assert_eq!(eight_b.grid.threads_per_block, [128, 1, 1]);
        assert_eq!(eight_b.stages, 2);
        assert_eq!(eight_b.grid.shared_memory_bytes, 128 + 4 * 2 * 4_608);
        let one_b = stream_plan(8_192, 2 * 1_152, 132).unwrap();
        assert_eq!(one_b.grid.blocks, [512, 1, 1]);
        assert_eq!(one_b.grid.threads_per_block, [256, 1, 1]);
        assert_eq!(one_b.stages, 2);
    }

    /// llama-3-8b's down projections on an H200 (227 KiB a block): Q4_K
    /// rows of 8,064 bytes in eight groups of three slots, Q6_K rows of
    /// 11,760 in eight groups of two, one block a multiprocessor.
    #[test]
    fn the_split_plans_fill_one_block_a_multiprocessor() {
        let q4_k = split_plan(4096, 8064, 132, 227 << 10).unwrap();
        assert_eq!((q4_k.grid.threads_per_block, q4_k.stages), ([512, 1, 1], 3));
        assert_eq!(q4_k.grid.blocks, [128, 1, 1]);
        let q6_k = split_plan(4096, 11_760, 132, 227 << 10).unwrap();
        assert_eq!((q6_k.grid.threads_per_block, q6_k.stages), ([512, 1, 1], 2));
        // Where a block may take 48 KiB only, fewer groups.
        let small = split_plan(4096, 8064, 132, 48 << 10).unwrap();
        assert_eq!((small.grid.threads_per_block, small.stages), ([128, 1, 1], 3));
        assert!(split_plan(4096, 30_000, 132, 48 << 10).is_none());
    }

    proptest::proptest! {
        /// A split plan's shared memory fits the limit and is what its
        /// groups' slots and shares take, and it gives no group more rows
        /// than every group that fits at once would.
        #[test]
        fn every_split_plan_fits_and_spreads_its_rows(
            rows in 1usize..100_000,
            row_units in 1usize..2_000,
            multiprocessors in 1u32..200,
            shared_kib in 16usize..228,
        ) {
            let (row_bytes, limit) = (16 * row_units, shared_kib << 10);
            let Some(plan) = split_plan(rows, row_bytes, multiprocessors, limit) else {
                proptest::prop_assert!(split_shared_bytes(1, 2, row_bytes) > limit);
                return Ok(());
            };
            let groups = (plan.grid.threads_per_block[0] / 64) as usize;
            let shared = plan.grid.shared_memory_bytes as usize;
            proptest::prop_assert!(shared <= limit && plan.stages >= 2);
            proptest::prop_assert_eq!(shared, split_shared_bytes(groups, plan.stages as usize, row_bytes));
            let resident = multiprocessors as usize * blocks_per_multiprocessor(shared, groups * 64) * groups;
            let total = plan.grid.blocks[0] as usize * groups;
            proptest::prop_assert!(total <= resident.max(groups));
            proptest::prop_assert_eq!(rows.div_ceil(total), rows.div_ceil(resident));
        }
    }

    proptest::proptest! {
        /// For random shapes a plan's shared memory fits without opting
        /// in and is what its warps' slots take, and no grid with more
        /// warps that fit at once would give any warp fewer rows.
        #[test]
        fn every_plan_fits_and_spreads_its_rows(
            rows in 1usize..200_000,
            slot_units in 1usize..1_500,
            multiprocessors in 1u32..200,
        ) {
            let slot_bytes = 16 * slot_units;
            let Some(plan) = stream_plan(rows, slot_bytes, multiprocessors) else {
                proptest::prop_assert!(barrier_bytes(2, 2) + 4 * slot_bytes > SHARED_LIMIT);
                return Ok(());
            };
            let warps = (plan.grid.threads_per_block[0] / 32) as usize;
            let stages = plan.stages as usize;
            let shared = plan.grid.shared_memory_bytes as usize;
            proptest::prop_assert!(stages >= 2 && shared <= SHARED_LIMIT);
            proptest::prop_assert_eq!(shared, barrier_bytes(warps, stages) + warps * stages * slot_bytes);
            let resident = multiprocessors as usize * blocks_per_multiprocessor(shared, warps * 32) * warps;
            let total_warps = plan.grid.blocks[0] as usize * warps;
            // Every row has a warp, the grid fits at once, and the busiest
            // warp has as few rows as with every warp that fits.
            proptest::prop_assert!(total_warps <= resident.max(warps));
            proptest::prop_assert_eq!(rows.div_ceil(total_warps), rows.div_ceil(resident));
        }
    }
}
