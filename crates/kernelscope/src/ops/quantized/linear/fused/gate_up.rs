//! Gate/up and SiLU·mul over x as a stage kernel left it (`StagedInput`),
//! and the same product staging its own output for the down projection
//! (`matvec_silu_<format>_q8_stage`, products.cuh: each block quantizes the
//! 32 rows it computed, so the down projection needs no quantize kernel).

use super::super::cuda::staged_bytes;
use super::super::gemm::scratch_view;
use super::super::layout::{BlockLayout, weight_blocks};
use super::super::streamed::{arguments as streamed_silu, norm_arguments as streamed_norm};
use super::{
    MATVEC_ADD, QuantizedFused, Reader, StagedInput, gate_up_blocks, product_grid, silu, silu_norm_stage,
    silu_stage,
};
use crate::Buffer;
use crate::error::{Error, Result};
use crate::ops::{Arguments, bytes_of, expect};
use crate::runtime::{CommandEncoder, DType, LaunchGrid, OpKind, Primitive};

/// Rows a block of the staging gate/up takes at a time (one 8-bit block of
/// its output), and its threads (`CHUNK_WARPS` warps, products.cuh).
pub(super) const CHUNK_ROWS: usize = 32;
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

    /// The reader of the MLP norm's stage before gate/up over `gate`:
    /// [`Reader::Streamed`] where Q4_K's gate/up streams.
    pub fn gate_up_reader(&self, gate: &Buffer) -> Reader {
        Reader::streamed_where(self.gate_up_reads_pending_norm(gate))
    }

    /// x (f32 `[k]`) quantized for the products of any format in this
    /// format's scratch: what the down projection reads. Its reader is
    /// launched as a register loop's is ([`Reader::Registers`]).
    pub fn encode_quantize(&self, encoder: &mut CommandEncoder, x: &Buffer) -> Result<StagedInput> {
        let length = x.len();
        let buffer = self.encode_stage(encoder, MATVEC_ADD, x, None, length, Reader::Registers)?;
        Ok(StagedInput::normalised(buffer, length))
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

    /// Whether gate/up of `n` rows of `k` values (`row_bytes` bytes a row)
    /// runs the kernel that stages its output (and reads an x still
    /// waiting for its norm): not where Q4_K's rows stream, and only for
    /// whole 32-row chunks.
    pub(super) fn gate_up_stages(&self, n: usize, k: usize, row_bytes: usize) -> bool {
        let streamed = self
            .streamed_gate_up
            .as_ref()
            .is_some_and(|streamed| streamed.plan(n, k, row_bytes, false).is_some());
        !streamed && n.is_multiple_of(CHUNK_ROWS)
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
        let row_bytes = gate.shape()[1];
        let pending = staged.pending_norm.as_ref();
        let mut bytes_read = (2 * n * blocks * self.format.block_bytes() + staged_bytes(k)) as u64;
        let mut kind = OpKind::fused(&[Primitive::MatVec, Primitive::SiluMul]);
        if pending.is_some() {
            bytes_read += bytes_of(k / CHUNK_ROWS, DType::F32);
            kind = OpKind::fused(&[Primitive::RmsNorm, Primitive::MatVec, Primitive::SiluMul]);
        }
        let flops = 4 * (n * k) as u64 + 6 * n as u64;
        let input = &staged.buffer;
        // Every kernel here takes gate/up's arguments first (tests check).
        let arguments = |list| {
            Arguments::new(list)
                .buffer(silu::X, input)
                .buffer(silu::GATE, gate)
                .buffer(silu::UP, up)
                .buffer(silu::OUT, out)
                .scalar(silu::N, n as u32)
                .scalar(silu::K, k as u32)
        };
        let streamed = self
            .streamed_gate_up
            .as_ref()
            .and_then(|streamed| streamed.plan(n, k, row_bytes, pending.is_some()));
        if let Some((kernel, plan)) = streamed {
            let list = match pending {
                Some(_) => streamed_norm::ARGUMENTS,
                None => streamed_silu::ARGUMENTS,
            };
            let mut streamed_arguments = arguments(list).scalar(streamed_silu::STAGES, plan.stages);
            if let Some(pending) = pending {
                streamed_arguments = streamed_arguments
                    .buffer(streamed_norm::SQUARES, &pending.squares)
                    .scalar(streamed_norm::EPS, pending.eps);
            }
            encoder.dispatch(
                streamed_arguments
                    .dispatch(kernel)?
                    .grid(plan.grid)
                    .cost(bytes_read, bytes_of(n, DType::F32), flops)
                    .op_kind(kind),
            )?;
            return Ok(None);
        }
        let stages = stage_output && self.gate_up_stages(n, k, row_bytes);
        if pending.is_some() && !stages {
            staged.expect_normalised(OP, silu::X)?;
        }
        if !stages {
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
        // x still waiting for its norm: the kernel that normalises the sums.
        let dispatch = match pending {
            None => arguments(silu_stage::ARGUMENTS)
                .buffer(silu_stage::STAGED, &output)
                .dispatch(&self.matvec_silu_stage)?,
            Some(pending) => arguments(silu_norm_stage::ARGUMENTS)
                .buffer(silu_norm_stage::STAGED, &output)
                .buffer(silu_norm_stage::SQUARES, &pending.squares)
                .scalar(silu_norm_stage::EPS, pending.eps)
                .dispatch(&self.matvec_silu_norm_stage)?,
        };
        encoder.dispatch(
            dispatch
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
        Ok(Some(StagedInput::normalised(output, n)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::arguments::assert_extends;

    /// The staging kernel takes gate/up's arguments first, in order (its
    /// dispatch fills them by gate/up's positions), then where it stages.
    #[test]
    fn the_staging_list_begins_with_gate_ups() {
        assert_extends(silu_stage::ARGUMENTS, silu::ARGUMENTS, &["staged"]);
    }

    /// The streamed kernels take gate/up's arguments first, in order, then
    /// their slots (and the norm's, where they finish it).
    #[test]
    fn the_streamed_lists_begin_with_gate_ups() {
        assert_extends(streamed_silu::ARGUMENTS, silu::ARGUMENTS, &["stages"]);
        assert_extends(
            streamed_norm::ARGUMENTS,
            silu::ARGUMENTS,
            &["stages", "squares", "eps"],
        );
    }

    /// The kernel over an x still waiting for its norm takes the staging
    /// kernel's arguments first, in order, then the norm's.
    #[test]
    fn the_norm_staging_list_begins_with_the_staging_ones() {
        assert_extends(
            silu_norm_stage::ARGUMENTS,
            silu_stage::ARGUMENTS,
            &["squares", "eps"],
        );
    }
}
