//! A dense layer's feed-forward half over quantized weights in one
//! persistent CUDA launch (`feed_forward.cu`): `x += down(silu(gate · n) *
//! (up · n))`, `n = rmsnorm(x) * norm_weight`, where decode otherwise runs
//! four kernels (norm and quantize, gate/up, quantize, down). Its blocks are
//! all resident at once and meet at two grid barriers; the down weights
//! stream into shared memory from the launch's start (Q4_K and Q6_K on
//! sm_90 and later) or are asked of L2 before the first barrier.
//!
//! The profile still sees inside: where dispatches are timed, each block
//! stamps the global timer at the four steps' boundaries into a ring the
//! profiler reads once the launch is done ([`crate::runtime::StampRing`]),
//! and the launch's record becomes one record per step (norm, gate/up,
//! quantize, down), marked as measured in-kernel.
//!
//! CUDA only; the CPU runs the steps apart. Every step's arithmetic is that
//! of the kernels it replaces, so the result is theirs bit for bit; the
//! reference it is tested against is the composition of the RMSNorm,
//! quantized mat-vec, SiLU·mul and add ops.

use std::sync::{Arc, Mutex};

use super::linear::streamed::{SHARED_PER_MULTIPROCESSOR, SHARED_RESERVED_PER_BLOCK, split_shared_bytes};
use super::linear::{BlockLayout, quantized_kernel, staged_bytes, weight_blocks};
use crate::error::{Error, Result};
use crate::ops::{Arguments, expect};
use crate::profile::PhasePlan;
use crate::quant::QuantFormat;
use crate::runtime::{
    Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind, Primitive, StampRing,
};

/// The arguments of `feed_forward_<gate>_<down>[_held<N>]`.
pub(crate) mod arguments {
    crate::ops::kernel_arguments! {
        X: "x" ReadWrite, NORM_WEIGHT: "norm_weight" Read, GATE: "gate" Read, UP: "up" Read, DOWN: "down" Read,
        H: "h" ReadWrite, HQ: "hq" ReadWrite, ARRIVALS: "arrivals" ReadWrite, LAUNCHES: "launches" ReadWrite,
        STAMPS: "stamps" ReadWrite,
        K: "k" U32, N: "n" U32, EPS: "eps" F32, STAGES: "stages" U32, STAMPING: "stamping" U32
    }
}
use arguments::*;
use costs::StepCosts;

mod costs;

/// Threads of a block (`QUANT_THREADS`): the row loops of products.cuh
/// assume it.
const THREADS: u32 = 256;
/// Blocks a multiprocessor runs at most: gate/up's register loop ran
/// fastest at three (`gate_up_blocks` in linear/fused.rs).
const MOST_BLOCKS_PER_MULTIPROCESSOR: u32 = 3;
/// The most and fewest rows a two-warp group keeps in flight.
const MOST_STAGES: usize = 8;
const FEWEST_STAGES: usize = 2;
/// Two-warp groups a block (`THREADS` / 64).
const GROUPS: usize = THREADS as usize / 64;
/// Steps the kernel runs and stamps (`FEED_FORWARD_STEPS` in feed_forward.cu).
const STEPS: u32 = 4;

/// The down formats whose rows stream (`HeldFormat` in streamed.cuh), and
/// the units the streaming loop reads them in.
fn streamed_units(format: QuantFormat) -> Option<&'static str> {
    match format {
        QuantFormat::Q4_K => Some("Q4_K_Pairs"),
        QuantFormat::Q6_K => Some("Q6_K"),
        _ => None,
    }
}

/// The formats with fused kernels on CUDA: every one (`linear/kernels.cu`).
fn fused_formats() -> impl Iterator<Item = QuantFormat> {
    QuantFormat::ALL.into_iter()
}

/// The kernel name for gate/up in `gate` and down in `down`, `held` units
/// of x a lane where down streams (0: the register loop).
fn kernel_name(gate: QuantFormat, down: QuantFormat, held: u32) -> String {
    match held {
        0 => format!("feed_forward_{}_{}", gate.name(), down.name()),
        _ => format!("feed_forward_{}_{}_held{held}", gate.name(), down.name()),
    }
}

/// Registers the kernels of every pair of formats on CUDA.
pub fn register(registry: &mut KernelRegistry) {
    for gate in fused_formats() {
        for down in fused_formats() {
            let source: Arc<str> = cuda_source(gate, down).into();
            let mut names = vec![kernel_name(gate, down, 0)];
            if streamed_units(down).is_some() {
                names.extend([2, 4].map(|held| kernel_name(gate, down, held)));
            }
            for name in names {
                registry.register_cuda_source(&name, source.clone());
                registry.register_format(&name, gate.name());
            }
        }
    }
}

/// The CUDA source of the kernels for gate/up in `gate`, down in `down`.
fn cuda_source(gate: QuantFormat, down: QuantFormat) -> String {
    let mut kernels = String::from(include_str!("feed_forward.cu"));
    if let Some(units) = streamed_units(down) {
        kernels.push_str(&include_str!("feed_forward_streamed.cu").replace("{DownUnits}", units));
    }
    let kernels = kernels
        .replace("{gate}", gate.name())
        .replace("{Gate}", &format!("{gate:?}"))
        .replace("{down}", down.name())
        .replace("{Down}", &format!("{down:?}"));
    super::linear::cuda_source_with(&format!("{}\n{kernels}", include_str!("../../persistent.cuh")))
}

/// Scratch the launches share: one stream runs the layers in turn.
#[derive(Debug, Default)]
struct Scratch {
    /// h in f32, h quantized, and the two barriers' words (zeroed once;
    /// the barriers need no reset).
    buffers: Option<(Buffer, Buffer, Buffer)>,
    /// The placeholder stamps and launch-counter arguments of launches
    /// that stamp nothing (two: a dispatch may not bind one buffer twice).
    no_stamps: Option<(Buffer, Buffer)>,
}

/// How one launch is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    kernel: usize,
    grid: LaunchGrid,
    stages: u32,
}

/// The feed-forward kernels for gate/up in one format and down in another.
#[derive(Clone, Debug)]
pub struct QuantizedFeedForward {
    /// The register loop's kernel, then the streamed ones (2 and 4 units
    /// of x a lane) where down streams and the device has bulk copies.
    kernels: Vec<Kernel>,
    gate: QuantFormat,
    down: QuantFormat,
    multiprocessors: u32,
    scratch: Arc<Mutex<Scratch>>,
}

impl QuantizedFeedForward {
    /// The kernels for gate/up in `gate` and down in `down` on `device`: an
    /// error where the backend has none (the CPU runs the steps apart).
    pub fn new(
        registry: &KernelRegistry,
        device: &Device,
        gate: QuantFormat,
        down: QuantFormat,
    ) -> Result<Self> {
        let capabilities = device.capabilities();
        let what = format!("{gate} gate/up and {down} down run in one launch");
        let kernel = |held| quantized_kernel(registry, device, kernel_name(gate, down, held), &what);
        let mut kernels = vec![kernel(0)?];
        if streamed_units(down).is_some() && capabilities.bulk_copies {
            kernels.extend([kernel(2)?, kernel(4)?]);
        }
        let multiprocessors = capabilities.multiprocessors.ok_or_else(|| Error::KernelMissing {
            name: kernel_name(gate, down, 0),
            backend: device.backend(),
            workaround: format!("{what} only where the device says how many multiprocessors it has"),
            remedies: &[],
        })?;
        Ok(QuantizedFeedForward {
            kernels,
            gate,
            down,
            multiprocessors,
            scratch: Arc::default(),
        })
    }

    /// The formats of gate/up and of down.
    pub fn formats(&self) -> (QuantFormat, QuantFormat) {
        (self.gate, self.down)
    }

    /// The launch for `k` model values and `n` hidden ones, down's rows of
    /// `down_row_bytes`: streamed where a kernel holds x for rows that
    /// long and its ring fits, the register loop elsewhere; blocks as many
    /// as the driver says stay resident (at most three a multiprocessor),
    /// which the grid barriers need.
    fn plan(&self, device: &Device, k: usize, n: usize, down_row_bytes: usize) -> Result<Plan> {
        let staged = staged_space(k);
        let streamed = self
            .kernels
            .iter()
            .enumerate()
            .skip(1)
            .find(|(index, _)| n <= held_rows_limit(*index as u32))
            .and_then(|(index, _)| {
                let stages = (FEWEST_STAGES..=MOST_STAGES).rev().find(|&stages| {
                    let shared = staged + ring_bytes(stages, down_row_bytes);
                    MOST_BLOCKS_PER_MULTIPROCESSOR as usize * (shared + SHARED_RESERVED_PER_BLOCK)
                        <= SHARED_PER_MULTIPROCESSOR
                })?;
                Some((index, stages, staged + ring_bytes(stages, down_row_bytes)))
            });
        let (kernel, stages, shared) = streamed.unwrap_or((0, 0, staged));
        let resident = device
            .resident_blocks(&self.kernels[kernel], THREADS, shared as u32)?
            .unwrap_or(0)
            .min(MOST_BLOCKS_PER_MULTIPROCESSOR);
        if resident == 0 {
            return Err(Error::KernelMissing {
                name: self.kernels[kernel].name().to_string(),
                backend: "cuda",
                workaround: format!(
                    "a block of {THREADS} threads and {shared} bytes of shared memory does not fit on a multiprocessor \
                     (its grid barriers need every block resident): run without --persistent-steps"
                ),
                remedies: &[],
            });
        }
        Ok(Plan {
            kernel,
            grid: LaunchGrid {
                blocks: [resident * self.multiprocessors, 1, 1],
                threads_per_block: [THREADS, 1, 1],
                shared_memory_bytes: shared as u32,
            },
            stages: stages as u32,
        })
    }

    /// `x += down · (silu(gate · n) * (up · n))`, `n = rmsnorm(x, eps) *
    /// norm_weight`: x and norm_weight f32 `[k]`, gate and up `[n, k]` in
    /// the gate format, down `[k, n]` in the down format, all in planes.
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        norm_weight: &Buffer,
        gate: &Buffer,
        up: &Buffer,
        down: &Buffer,
        eps: f32,
    ) -> Result<()> {
        const OP: &str = "quantized feed_forward";
        let (n, gate_blocks, k) = weight_blocks(OP, self.gate, BlockLayout::Planes, gate)?;
        let (up_rows, _, up_k) = weight_blocks(OP, self.gate, BlockLayout::Planes, up)?;
        let (down_rows, down_blocks, down_k) = weight_blocks(OP, self.down, BlockLayout::Planes, down)?;
        if (up_rows, up_k) != (n, k) || (down_rows, down_k) != (k, n) {
            return Err(Error::ShapeMismatch {
                context: format!("{OP}: up is [n, k] as gate is, down [k, n]"),
                expected: vec![n, k, k, n],
                found: vec![up_rows, up_k, down_rows, down_k],
            });
        }
        if !k.is_multiple_of(32) || !n.is_multiple_of(32) {
            return Err(Error::ShapeMismatch {
                context: format!("{OP} quantizes x and h in blocks of 32 values"),
                expected: vec![k.next_multiple_of(32), n.next_multiple_of(32)],
                found: vec![k, n],
            });
        }
        expect(OP, "input", x, DType::F32, &[k])?;
        expect(OP, "norm weight", norm_weight, DType::F32, &[k])?;
        let device = encoder.device().clone();
        let plan = self.plan(&device, k, n, down.shape()[1])?;
        let (h, hq, arrivals, no_stamps) = self.scratch_for(&device, n)?;
        let blocks = plan.grid.blocks[0];
        let costs = StepCosts::new(self.gate, self.down, k, n, gate_blocks, down_blocks);
        let ring = if device.profiler().times_dispatches() {
            Some(device.stamp_ring(blocks, STEPS)?)
        } else {
            None
        };
        let stamps = ring.as_ref().map_or(&no_stamps.0, StampRing::buffer);
        let launches = ring.as_ref().map_or(&no_stamps.1, StampRing::launches);
        let (read, written, flops) = costs.total();
        let mut dispatch = Arguments::new(ARGUMENTS)
            .buffer(X, x)
            .buffer(NORM_WEIGHT, norm_weight)
            .buffer(GATE, gate)
            .buffer(UP, up)
            .buffer(DOWN, down)
            .buffer(H, &h)
            .buffer(HQ, &hq)
            .buffer(ARRIVALS, &arrivals)
            .buffer(LAUNCHES, launches)
            .buffer(STAMPS, stamps)
            .scalar(K, k as u32)
            .scalar(N, n as u32)
            .scalar(EPS, eps)
            .scalar(STAGES, plan.stages)
            .scalar(STAMPING, u32::from(ring.is_some()))
            .dispatch(&self.kernels[plan.kernel])?
            .grid(plan.grid)
            .cost(read, written, flops)
            .op_kind(OpKind::fused(&[
                Primitive::RmsNorm,
                Primitive::MatVec,
                Primitive::SiluMul,
                Primitive::ElemAdd,
            ]));
        if let Some(ring) = ring {
            dispatch = dispatch.phases(Arc::new(PhasePlan::new(costs.phases(), blocks, ring.source())));
        }
        encoder.dispatch(dispatch)
    }

    /// The shared scratch, grown to `n` hidden values.
    fn scratch_for(&self, device: &Device, n: usize) -> Result<(Buffer, Buffer, Buffer, (Buffer, Buffer))> {
        let mut scratch = self.scratch.lock().expect("not poisoned");
        let fits = scratch.buffers.as_ref().is_some_and(|(h, _, _)| h.len() >= n);
        if !fits {
            scratch.buffers = Some((
                device.alloc(DType::F32, &[n])?,
                device.alloc(DType::U8, &[staged_bytes(n)])?,
                device.alloc(DType::U32, &[2])?,
            ));
        }
        if scratch.no_stamps.is_none() {
            scratch.no_stamps = Some((device.alloc(DType::U32, &[2])?, device.alloc(DType::U32, &[2])?));
        }
        let (h, hq, arrivals) = scratch.buffers.clone().expect("made above");
        let no_stamps = scratch.no_stamps.clone().expect("made above");
        Ok((h.slice(0, n)?, hq.slice(0, staged_bytes(n))?, arrivals, no_stamps))
    }
}

/// The longest rows (values) the streamed kernel `index` holds x for: two
/// warps of 32 lanes, 2 or 4 units of 64 values a lane.
fn held_rows_limit(index: u32) -> usize {
    match index {
        1 => 8_192,
        _ => 16_384,
    }
}

/// Shared memory x takes staged, rounded to 128 bytes
/// (`feed_forward_staged_space` in feed_forward.cu).
fn staged_space(k: usize) -> usize {
    staged_bytes(k).div_ceil(128) * 128
}

/// The down ring's shared memory (SplitRows of streamed.cuh, laid out as
/// the split kernels' rings are).
fn ring_bytes(stages: usize, row_bytes: usize) -> usize {
    split_shared_bytes(GROUPS, stages, row_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_and_staged_x_are_laid_out_as_the_kernel_lays_them() {
        // 2,048 values: 2,048 bytes and 64 scales and sums of 4 bytes.
        assert_eq!(staged_space(2_048), 2_560);
        assert_eq!(
            staged_space(4_096 + 32),
            (4_128 + 8 * 129usize).div_ceil(128) * 128
        );
        // Four groups of three slots: 12 barriers (one line), 8 shares
        // (one line), then the rows.
        assert_eq!(ring_bytes(3, 6_720), 128 + 128 + 12 * 6_720);
    }

    #[test]
    fn the_kernel_stamps_as_many_steps_as_its_costs_declare() {
        assert!(include_str!("feed_forward.cu").contains(&format!("#define FEED_FORWARD_STEPS {STEPS}\n")));
        let costs = StepCosts::new(QuantFormat::Q4_K, QuantFormat::Q6_K, 2_048, 8_192, 8, 32);
        assert_eq!(costs.phases().len(), STEPS as usize);
    }

    #[test]
    fn every_pair_of_formats_has_its_kernels_registered() {
        let mut registry = KernelRegistry::new();
        register(&mut registry);
        let names: Vec<&str> = registry
            .cuda_sources()
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        for gate in fused_formats() {
            for down in fused_formats() {
                assert!(
                    names.contains(&kernel_name(gate, down, 0).as_str()),
                    "{gate} {down}"
                );
                let streams = names.contains(&kernel_name(gate, down, 2).as_str());
                assert_eq!(streams, streamed_units(down).is_some(), "{gate} {down}");
            }
        }
        assert_eq!(fused_formats().count(), QuantFormat::ALL.len());
    }

    #[test]
    fn streamed_kernels_exist_for_the_formats_that_hold_x() {
        assert_eq!(
            kernel_name(QuantFormat::Q4_K, QuantFormat::Q6_K, 0),
            "feed_forward_q4_k_q6_k"
        );
        assert_eq!(
            kernel_name(QuantFormat::Q4_K, QuantFormat::Q4_K, 2),
            "feed_forward_q4_k_q4_k_held2"
        );
        assert!(streamed_units(QuantFormat::Q8_0).is_none());
        assert_eq!(held_rows_limit(1), 8_192);
        assert_eq!(held_rows_limit(2), 16_384);
    }
}
