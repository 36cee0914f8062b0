//! The fused products that hand their output to the next product
//! (`handoff.cuh`): the last block of the grid to finish quantizes the
//! whole output into the staged layout the next product reads, so the
//! kernel that did it apart (`quantize_q8`, `norm_quantize_q8`) is gone.
//! o_proj and the down projection stage `rmsnorm(out) * norm_weight` for
//! the next norm's readers (gate/up, the next layer's q/k/v, the LM head),
//! gate/up its output for the down projection. Also the dispatches of the
//! mat-vec adding into the residual stream and of gate/up, which the plain
//! products share with their handing-off twins.

use std::sync::{Arc, Mutex};

use super::super::cuda::{CUDA_MOST_BLOCKS, ROWS_PER_WARP, staged_bytes};
use super::super::gemm::scratch_view;
use super::super::layout::{BlockLayout, weight_blocks};
use super::super::streamed::{
    add_arguments as streamed_add, add_handoff_arguments as streamed_add_handoff, arguments as streamed_silu,
    silu_handoff_arguments as streamed_silu_handoff,
};
use super::{
    MATVEC_ADD, QuantizedFused, StagedInput, add_norm_stage, gate_up_blocks, product_grid, silu, silu_stage,
};
use crate::error::{Error, Result};
use crate::ops::matvec::residual as add;
use crate::ops::{Arguments, bytes_of, expect};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Dispatch, OpKind, Primitive};

/// Threads a block normalising in its handoff needs at least
/// (`STAGE_THREADS`, handoff.cuh: the sum of squares is theirs).
const STAGE_THREADS: u32 = 256;
/// Shared memory the handoff takes besides a kernel's own (its reduction's
/// partial sums and a flag), with room to spare: a streamed kernel whose
/// ring leaves less than this under the device's limit does not hand off.
const HANDOFF_SHARED_BYTES: usize = 1 << 10;

/// Where the handing-off products of one format stage their outputs, and
/// the count of their blocks' arrivals.
#[derive(Clone, Debug)]
pub(super) struct HandedOff {
    /// `rmsnorm(out) * norm_weight`, handed off by the products adding into
    /// the residual stream (read by gate/up and the next layer's q/k/v).
    normalised: Arc<Mutex<Option<Buffer>>>,
    /// Gate/up's output (read by the down projection, which hands off into
    /// `normalised`: no product reads the slot it writes).
    activation: Arc<Mutex<Option<Buffer>>>,
    /// One u32, 0 between launches: each block adds one as it finishes, and
    /// the last sets it back.
    arrivals: Buffer,
}

impl HandedOff {
    pub(super) fn new(device: &Device) -> Result<Self> {
        Ok(HandedOff {
            normalised: Arc::default(),
            activation: Arc::default(),
            arrivals: device.buffer_from_slice(&[0u32], &[1])?,
        })
    }

    /// A staged x of `length` values in `slot`'s scratch, grown to fit.
    fn scratch(device: &Device, slot: &Mutex<Option<Buffer>>, length: usize) -> Result<StagedInput> {
        let mut slot = slot.lock().expect("not poisoned");
        let buffer = scratch_view(device, &mut slot, DType::U8, &[staged_bytes(length)])?;
        Ok(StagedInput { buffer, length })
    }
}

impl QuantizedFused {
    /// `out[n] += weight · x`, x as `staged` holds it, whose last block to
    /// finish then quantizes `rmsnorm(out, eps) * norm_weight` (f32 `[n]`)
    /// for the next norm's readers, the bytes
    /// [`encode_norm_stage`](Self::encode_norm_stage) of `out` would
    /// write. Returns that staged input (valid until the next handoff of
    /// this format), or `None` where the product that runs cannot hand off
    /// (a streamed down projection whose blocks are fewer than 256 threads
    /// or whose ring fills the shared memory): the readers then stage it.
    pub fn encode_matvec_add_handing_off(
        &self,
        encoder: &mut CommandEncoder,
        weight: &Buffer,
        staged: &StagedInput,
        out: &Buffer,
        norm_weight: &Buffer,
        eps: f32,
    ) -> Result<Option<StagedInput>> {
        self.encode_add(encoder, weight, staged, out, Some((norm_weight, eps)))
    }

    /// `out[i] = silu(gate[i] · x) * (up[i] · x)`, x as `staged` holds it
    /// (normalised by [`encode_norm_stage`](Self::encode_norm_stage), or
    /// handed off by [`encode_matvec_add_handing_off`]
    /// (Self::encode_matvec_add_handing_off)). Where `hand_off` says, its
    /// last block then quantizes `out` for the down projection: returns
    /// that staged input (`None` otherwise), valid until the next gate/up
    /// handing off in this format.
    pub fn encode_matvec_silu_staged(
        &self,
        encoder: &mut CommandEncoder,
        staged: &StagedInput,
        gate: &Buffer,
        up: &Buffer,
        out: &Buffer,
        hand_off: bool,
    ) -> Result<Option<StagedInput>> {
        self.encode_gate_up(encoder, staged, gate, up, out, hand_off)
    }

    /// x (f32 `[k]`) quantized for the products of any format, in this
    /// format's scratch: what [`encode_matvec_add_staged`]
    /// (Self::encode_matvec_add_staged) reads where no product handed x off.
    pub fn encode_quantize(&self, encoder: &mut CommandEncoder, x: &Buffer) -> Result<StagedInput> {
        let length = x.len();
        let buffer = self.encode_stage(encoder, MATVEC_ADD, x, None, length)?;
        Ok(StagedInput { buffer, length })
    }

    /// The mat-vec adding into the residual stream, handing off where
    /// `handoff` gives the next norm's weight and eps and the kernel can.
    pub(super) fn encode_add(
        &self,
        encoder: &mut CommandEncoder,
        weight: &Buffer,
        staged: &StagedInput,
        out: &Buffer,
        handoff: Option<(&Buffer, f32)>,
    ) -> Result<Option<StagedInput>> {
        const OP: &str = MATVEC_ADD;
        let (n, blocks, k) = weight_blocks(OP, self.format, BlockLayout::Planes, weight)?;
        expect(OP, "output", out, DType::F32, &[n])?;
        if staged.length != k {
            return Err(Error::ShapeMismatch {
                context: format!("{OP}: x staged for another length than the weight's rows"),
                expected: vec![k],
                found: vec![staged.length],
            });
        }
        if let Some((norm_weight, _)) = handoff {
            expect(OP, "next norm's weight", norm_weight, DType::F32, &[n])?;
        }
        let streamed = self
            .streamed_down
            .as_ref()
            .and_then(|streamed| Some((streamed, streamed.plan(n, k, weight.shape()[1])?)));
        let handoff = handoff.filter(|_| match &streamed {
            Some((streamed, (_, plan))) => {
                plan.grid.threads_per_block[0] >= STAGE_THREADS
                    && plan.grid.shared_memory_bytes as usize + HANDOFF_SHARED_BYTES
                        <= streamed.shared_limit()
            }
            None => true,
        });
        let handed = handoff
            .map(|_| HandedOff::scratch(encoder.device(), &self.handed_off.normalised, n))
            .transpose()?;
        let (input, arrivals) = (&staged.buffer, &self.handed_off.arrivals);
        let dispatch = match (streamed, handoff.zip(handed.as_ref())) {
            (Some((_, (held, plan))), handoff) => {
                let arguments = |list| {
                    Arguments::new(list)
                        .buffer(streamed_add::WEIGHT, weight)
                        .buffer(streamed_add::X, input)
                        .buffer(streamed_add::OUT, out)
                        .scalar(streamed_add::N, n as u32)
                        .scalar(streamed_add::K, k as u32)
                        .scalar(streamed_add::STAGES, plan.stages)
                };
                match handoff {
                    Some(((norm_weight, eps), handed)) => arguments(streamed_add_handoff::ARGUMENTS)
                        .buffer(streamed_add_handoff::NORM_WEIGHT, norm_weight)
                        .buffer(streamed_add_handoff::STAGED, &handed.buffer)
                        .buffer(streamed_add_handoff::ARRIVALS, arrivals)
                        .scalar(streamed_add_handoff::EPS, eps)
                        .dispatch(&held.handing_off)?,
                    None => arguments(streamed_add::ARGUMENTS).dispatch(&held.kernel)?,
                }
                .grid(plan.grid)
            }
            (None, handoff) => {
                let arguments = |list| {
                    Arguments::new(list)
                        .buffer(add::WEIGHT, weight)
                        .buffer(add::X, input)
                        .buffer(add::OUT, out)
                        .scalar(add::N, n as u32)
                        .scalar(add::K, k as u32)
                };
                match handoff {
                    Some(((norm_weight, eps), handed)) => arguments(add_norm_stage::ARGUMENTS)
                        .buffer(add_norm_stage::NORM_WEIGHT, norm_weight)
                        .buffer(add_norm_stage::STAGED, &handed.buffer)
                        .buffer(add_norm_stage::ARRIVALS, arrivals)
                        .scalar(add_norm_stage::EPS, eps)
                        .dispatch(&self.matvec_add_norm_stage)?,
                    None => arguments(add::ARGUMENTS).dispatch(&self.matvec_add)?,
                }
                .grid(product_grid(n, ROWS_PER_WARP, CUDA_MOST_BLOCKS))
            }
        };
        let read =
            (n * blocks * self.format.block_bytes() + staged_bytes(k)) as u64 + bytes_of(n, DType::F32);
        let (dispatch, primitives) = declared_cost(
            dispatch,
            (read, bytes_of(n, DType::F32), 2 * (n * k) as u64 + n as u64),
            handoff.map(|_| n),
            true,
        );
        encoder.dispatch(dispatch.op_kind(OpKind::fused(primitives)))?;
        Ok(handed)
    }

    /// Gate/up and SiLU·mul over x as `staged` holds it, handing `out` off
    /// where `hand_off` says.
    pub(super) fn encode_gate_up(
        &self,
        encoder: &mut CommandEncoder,
        staged: &StagedInput,
        gate: &Buffer,
        up: &Buffer,
        out: &Buffer,
        hand_off: bool,
    ) -> Result<Option<StagedInput>> {
        const OP: &str = "quantized matvec_silu";
        let (n, blocks, k) = weight_blocks(OP, self.format, BlockLayout::Planes, gate)?;
        let (up_rows, _, up_k) = weight_blocks(OP, self.format, BlockLayout::Planes, up)?;
        if (up_rows, up_k) != (n, k) || staged.length != k {
            return Err(Error::ShapeMismatch {
                context: format!("{OP}: the up projection's shape or x's length differs from the gate's"),
                expected: vec![n, k, k],
                found: vec![up_rows, up_k, staged.length],
            });
        }
        expect(OP, "output", out, DType::F32, &[n])?;
        let handed = hand_off
            .then(|| HandedOff::scratch(encoder.device(), &self.handed_off.activation, n))
            .transpose()?;
        let (input, arrivals) = (&staged.buffer, &self.handed_off.arrivals);
        let streamed = self
            .streamed_gate_up
            .as_ref()
            .and_then(|streamed| streamed.plan(n, k, gate.shape()[1]));
        let dispatch = match streamed {
            Some((held, plan)) => {
                let arguments = |list| {
                    Arguments::new(list)
                        .buffer(streamed_silu::X, input)
                        .buffer(streamed_silu::GATE, gate)
                        .buffer(streamed_silu::UP, up)
                        .buffer(streamed_silu::OUT, out)
                        .scalar(streamed_silu::N, n as u32)
                        .scalar(streamed_silu::K, k as u32)
                        .scalar(streamed_silu::STAGES, plan.stages)
                };
                match &handed {
                    Some(handed) => arguments(streamed_silu_handoff::ARGUMENTS)
                        .buffer(streamed_silu_handoff::STAGED, &handed.buffer)
                        .buffer(streamed_silu_handoff::ARRIVALS, arrivals)
                        .dispatch(&held.handing_off)?,
                    None => arguments(streamed_silu::ARGUMENTS).dispatch(&held.kernel)?,
                }
                .grid(plan.grid)
            }
            None => {
                let arguments = |list| {
                    Arguments::new(list)
                        .buffer(silu::X, input)
                        .buffer(silu::GATE, gate)
                        .buffer(silu::UP, up)
                        .buffer(silu::OUT, out)
                        .scalar(silu::N, n as u32)
                        .scalar(silu::K, k as u32)
                };
                match &handed {
                    Some(handed) => arguments(silu_stage::ARGUMENTS)
                        .buffer(silu_stage::STAGED, &handed.buffer)
                        .buffer(silu_stage::ARRIVALS, arrivals)
                        .dispatch(&self.matvec_silu_stage)?,
                    None => arguments(silu::ARGUMENTS).dispatch(&self.matvec_silu)?,
                }
                .grid(product_grid(n, 1, gate_up_blocks(self.format)))
            }
        };
        let read = (2 * n * blocks * self.format.block_bytes() + staged_bytes(k)) as u64;
        let (dispatch, primitives) = declared_cost(
            dispatch,
            (read, bytes_of(n, DType::F32), 4 * (n * k) as u64 + 6 * n as u64),
            handed.as_ref().map(|_| n),
            false,
        );
        encoder.dispatch(dispatch.op_kind(OpKind::fused(primitives)))?;
        Ok(handed)
    }
}

/// A product's declared cost `(read, written, flops)` and its primitives,
/// with its handoff's where it hands off `Some(n)` values: the output read
/// back (and the norm weight, where `adds` says it adds into the residual
/// stream and so normalises), the staged bytes written, the norm's and
/// quantization's arithmetic.
fn declared_cost(
    dispatch: Dispatch,
    (read, written, flops): (u64, u64, u64),
    handed: Option<usize>,
    adds: bool,
) -> (Dispatch, &'static [Primitive]) {
    let primitives: &'static [Primitive] = match (adds, handed.is_some()) {
        (true, false) => &[Primitive::MatVec, Primitive::ElemAdd],
        (true, true) => &[Primitive::MatVec, Primitive::ElemAdd, Primitive::RmsNorm],
        (false, _) => &[Primitive::MatVec, Primitive::SiluMul],
    };
    let Some(n) = handed else {
        return (dispatch.cost(read, written, flops), primitives);
    };
    let (extra_read, extra_flops) = if adds {
        (bytes_of(2 * n, DType::F32), 6 * n as u64)
    } else {
        (bytes_of(n, DType::F32), 2 * n as u64)
    };
    (
        dispatch.cost(
            read + extra_read,
            written + staged_bytes(n) as u64,
            flops + extra_flops,
        ),
        primitives,
    )
}

#[cfg(test)]
mod tests {
    use super::super::super::arguments::{add_norm_stage, silu, silu_stage};
    use super::*;

    /// The handing-off kernels take their plain twins' arguments first, in
    /// order (the dispatches above fill them by the plain lists' positions),
    /// then the handoff's.
    #[test]
    fn every_handing_off_list_begins_with_its_twins() {
        for (twin, handing_off, handoff) in [
            (
                add::ARGUMENTS,
                add_norm_stage::ARGUMENTS,
                ["norm_weight", "staged", "arrivals", "eps"].as_slice(),
            ),
            (silu::ARGUMENTS, silu_stage::ARGUMENTS, &["staged", "arrivals"]),
            (
                streamed_add::ARGUMENTS,
                streamed_add_handoff::ARGUMENTS,
                &["norm_weight", "staged", "arrivals", "eps"],
            ),
            (
                streamed_silu::ARGUMENTS,
                streamed_silu_handoff::ARGUMENTS,
                &["staged", "arrivals"],
            ),
        ] {
            assert_eq!(&handing_off[..twin.len()], twin);
            let names: Vec<&str> = handing_off[twin.len()..]
                .iter()
                .map(|argument| argument.name)
                .collect();
            assert_eq!(names, handoff);
        }
    }
}
