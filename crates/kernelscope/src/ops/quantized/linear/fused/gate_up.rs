//! Gate/up and SiLU·mul over x as a stage kernel left it (`StagedInput`),
//! and the same product staging its own output for the down projection
//! (`matvec_silu_<format>_q8_stage`, products.cuh: each block quantizes the
//! 32 rows it computed, so the down projection needs no quantize kernel).

use super::super::cuda::staged_bytes;
use super::super::gemm::scratch_view;
use super::super::layout::{BlockLayout, weight_blocks};
use super::super::streamed::arguments as streamed_silu;
use super::{MATVEC_ADD, QuantizedFused, StagedInput, gate_up_blocks, product_grid, silu, silu_stage};
use crate::Buffer;
use crate::error::{Error, Result};
use crate::ops::{Arguments, bytes_of, expect};
use crate::runtime::{CommandEncoder, DType, LaunchGrid, OpKind, Primitive};

/// Rows a block of the staging gate/up takes at a time (one 8-bit block of
/// its output), and its threads (`CHUNK_WARPS` warps, products.cuh).
const CHUNK_ROWS: usize = 32;
const CHUNK_THREADS: u32 = 12 * 32;

impl QuantizedFused {
    /// `out[i] = silu(gate[i] · x) * (up[i] · x)`, x as `staged` holds it
    /// (normalised by [`encode_norm_stage`](Self::encode_norm_stage)), and
    /// `out` staged for the down projection by the same kernel: returns
    /// that staged input (what [`encode_quantize`](Self::encode_quantize) of
    /// `out` would write), valid until the next such product of this
    /// format. `None` where the product that runs stages nothing (Q4_K's
    /// streamed gate/up on long rows): the down projection then quantizes.
    pub fn encode_matvec_silu_staged(
        &self,
        encoder: &mut CommandEncoder,
        staged: &StagedInput,
        gate: &Buffer,
        up: &Buffer,
        out: &Buffer,
    ) -> Result<Option<StagedInput>> {
        self.encode_gate_up(encoder, staged, gate, up, out, true)
    }

    /// x (f32 `[k]`) quantized for the products of any format in this
    /// format's scratch: what the down projection reads.
    pub fn encode_quantize(&self, encoder: &mut CommandEncoder, x: &Buffer) -> Result<StagedInput> {
        let length = x.len();
        let buffer = self.encode_stage(encoder, MATVEC_ADD, x, None, length)?;
        Ok(StagedInput { buffer, length })
    }

    /// Gate/up's rows, blocks a row and row length (`weight_blocks`), once
    /// up and the output are checked against it.
    pub(super) fn gate_up_shape(
        &self,
        op: &str,
        gate: &Buffer,
        up: &Buffer,
        out: &Buffer,
    ) -> Result<(usize, usize, usize)> {
        let (n, blocks, k) = weight_blocks(op, self.format, BlockLayout::Planes, gate)?;
        let (up_rows, _, up_k) = weight_blocks(op, self.format, BlockLayout::Planes, up)?;
        if (up_rows, up_k) != (n, k) {
            return Err(Error::ShapeMismatch {
                context: format!("{op}: the up projection's shape differs from the gate's"),
                expected: vec![n, k],
                found: vec![up_rows, up_k],
            });
        }
        expect(op, "output", out, DType::F32, &[n])?;
        Ok((n, blocks, k))
    }

    /// Gate/up and SiLU·mul over `staged`, staging `out` as well where
    /// `stage_output` asks and the product that runs can.
    pub(super) fn encode_gate_up(
        &self,
        encoder: &mut CommandEncoder,
        staged: &StagedInput,
        gate: &Buffer,
        up: &Buffer,
        out: &Buffer,
        stage_output: bool,
    ) -> Result<Option<StagedInput>> {
        const OP: &str = "quantized matvec_silu";
        let (n, blocks, k) = self.gate_up_shape(OP, gate, up, out)?;
        if staged.length != k {
            return Err(Error::ShapeMismatch {
                context: format!("{OP}: x's length differs from the gate's rows"),
                expected: vec![k],
                found: vec![staged.length],
            });
        }
        let bytes_read = (2 * n * blocks * self.format.block_bytes() + staged_bytes(k)) as u64;
        let flops = 4 * (n * k) as u64 + 6 * n as u64;
        let kind = OpKind::fused(&[Primitive::MatVec, Primitive::SiluMul]);
        let input = &staged.buffer;
        let streamed = self
            .streamed_gate_up
            .as_ref()
            .and_then(|streamed| streamed.plan(n, k, gate.shape()[1]));
        if let Some((kernel, plan)) = streamed {
            encoder.dispatch(
                Arguments::new(streamed_silu::ARGUMENTS)
                    .buffer(streamed_silu::X, input)
                    .buffer(streamed_silu::GATE, gate)
                    .buffer(streamed_silu::UP, up)
                    .buffer(streamed_silu::OUT, out)
                    .scalar(streamed_silu::N, n as u32)
                    .scalar(streamed_silu::K, k as u32)
                    .scalar(streamed_silu::STAGES, plan.stages)
                    .dispatch(kernel)?
                    .grid(plan.grid)
                    .cost(bytes_read, bytes_of(n, DType::F32), flops)
                    .op_kind(kind),
            )?;
            return Ok(None);
        }
        let arguments = |list| {
            Arguments::new(list)
                .buffer(silu::X, input)
                .buffer(silu::GATE, gate)
                .buffer(silu::UP, up)
                .buffer(silu::OUT, out)
                .scalar(silu::N, n as u32)
                .scalar(silu::K, k as u32)
        };
        if !(stage_output && n.is_multiple_of(CHUNK_ROWS)) {
            encoder.dispatch(
                arguments(silu::ARGUMENTS)
                    .dispatch(&self.matvec_silu)?
                    .grid(product_grid(n, 1, gate_up_blocks(self.format)))
                    .cost(bytes_read, bytes_of(n, DType::F32), flops)
                    .op_kind(kind),
            )?;
            return Ok(None);
        }
        let output = {
            let mut slot = self.activation.lock().expect("not poisoned");
            scratch_view(encoder.device(), &mut slot, DType::U8, &[staged_bytes(n)])?
        };
        encoder.dispatch(
            arguments(silu_stage::ARGUMENTS)
                .buffer(silu_stage::STAGED, &output)
                .dispatch(&self.matvec_silu_stage)?
                .grid(LaunchGrid {
                    blocks: [(n / CHUNK_ROWS) as u32, 1, 1],
                    threads_per_block: [CHUNK_THREADS, 1, 1],
                    shared_memory_bytes: 0,
                })
                .cost(
                    bytes_read,
                    bytes_of(n, DType::F32) + staged_bytes(n) as u64,
                    flops + 2 * n as u64,
                )
                .op_kind(kind),
        )?;
        Ok(Some(StagedInput {
            buffer: output,
            length: n,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The staging kernel takes gate/up's arguments first, in order (its
    /// dispatch fills them by gate/up's positions), then where it stages.
    #[test]
    fn the_staging_list_begins_with_gate_ups() {
        assert_eq!(&silu_stage::ARGUMENTS[..silu::ARGUMENTS.len()], silu::ARGUMENTS);
        let rest: Vec<&str> = silu_stage::ARGUMENTS[silu::ARGUMENTS.len()..]
            .iter()
            .map(|argument| argument.name)
            .collect();
        assert_eq!(rest, ["staged"]);
    }
}
