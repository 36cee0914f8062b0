//! o_proj staging the residual stream for the RMSNorm after it
//! (`matvec_add_<format>_q8_norm_stage`, chunked.cuh): each block adds 32
//! rows into the residual, then quantizes them times the norm's weight and
//! writes their sum of squares, so the norm-and-quantize kernel before
//! gate/up goes; gate/up (Q4_K's streamed `stream_silu_q4_k_held*_norm`
//! in the engine, the register `matvec_silu_<format>_q8_norm_stage` where
//! asked) takes the RMS from those sums and multiplies its sums by
//! 1 / RMS. Q4_K's rows of 2,048 values and more stream where the device
//! has bulk copies (`stream_add_q4_k_held*_norm_stage`,
//! `streamed_norm_stage.rs`). 8-bit
//! quantization is scale-invariant, so this is the norm within a rounding
//! of each value's 8-bit step (not bit for bit `norm_quantize_q8`).

use super::super::cuda::staged_bytes;
use super::super::gemm::scratch_view;
use super::super::layout::{BlockLayout, weight_blocks};
use super::gate_up::CHUNK_ROWS;
use super::{MATVEC_ADD, PendingNorm, QuantizedFused, StagedInput, matvec_add_norm_stage as arguments};
use crate::Buffer;
use crate::error::{Error, Result};
use crate::ops::{Arguments, bytes_of, expect};
use crate::runtime::{CommandEncoder, DType, LaunchGrid, OpKind, Primitive};

/// Threads of a block of the norm-staging o_proj (`NORM_STAGE_WARPS`
/// warps, chunked.cuh).
const NORM_STAGE_THREADS: u32 = 16 * 32;

impl QuantizedFused {
    /// Whether the engine hands gate/up over `gate` (up of its shape) an x
    /// o_proj staged before its norm: where Q4_K's rows stream (long rows:
    /// llama-3-8b's gate/up), whose kernel finishes the norm with x's own
    /// loads. The register kernel that stages its output can finish it too
    /// ([`encode_matvec_silu_staged`](Self::encode_matvec_silu_staged)
    /// takes such an x), but on llama-3.2-1b o_proj's norm staging and the
    /// sums' 1 / RMS cost more than the norm kernel they replace (o_proj
    /// 2.8 -> 3.8 µs, gate/up 8.9 -> 9.7 µs a call, the norm 2.1; H200), so
    /// those keep the norm's kernel.
    pub fn gate_up_reads_pending_norm(&self, gate: &Buffer) -> bool {
        let Ok((n, _, k)) = weight_blocks(MATVEC_ADD, self.format, BlockLayout::Planes, gate) else {
            return false;
        };
        self.streamed_gate_up
            .as_ref()
            .is_some_and(|streamed| streamed.plan(n, k, gate.shape()[1], true).is_some())
    }

    /// `out[n] += weight · x` (x as `staged` holds it), and the new `out`
    /// staged for the readers of `rmsnorm(out, eps) * norm_weight`: the
    /// staged input returned holds `out * norm_weight` quantized and the
    /// sums of squares the norm is finished with, which only gate/up reads
    /// ([`Self::gate_up_reads_pending_norm`]). Valid
    /// until the next such product of this format. `out` has whole blocks
    /// of 32 values.
    pub fn encode_matvec_add_norm_staged(
        &self,
        encoder: &mut CommandEncoder,
        weight: &Buffer,
        staged: &StagedInput,
        out: &Buffer,
        norm_weight: &Buffer,
        eps: f32,
    ) -> Result<StagedInput> {
        const OP: &str = "quantized matvec_add with the next norm's staging";
        let (n, blocks, k) = weight_blocks(OP, self.format, BlockLayout::Planes, weight)?;
        expect(OP, "output", out, DType::F32, &[n])?;
        expect(OP, "norm weight", norm_weight, DType::F32, &[n])?;
        if staged.length != k {
            return Err(Error::ShapeMismatch {
                context: format!("{OP}: x staged for another length than the weight's rows"),
                expected: vec![k],
                found: vec![staged.length],
            });
        }
        if !n.is_multiple_of(CHUNK_ROWS) {
            return Err(Error::ShapeMismatch {
                context: format!("{OP}: the output is staged in whole blocks of {CHUNK_ROWS}"),
                expected: vec![n.div_ceil(CHUNK_ROWS) * CHUNK_ROWS],
                found: vec![n],
            });
        }
        staged.expect_normalised(OP, arguments::X)?;
        let device = encoder.device().clone();
        let output = {
            let mut slot = self.norm_staged.lock().expect("not poisoned");
            scratch_view(&device, &mut slot, DType::U8, &[staged_bytes(n)])?
        };
        let squares = {
            let mut slot = self.squares.lock().expect("not poisoned");
            scratch_view(&device, &mut slot, DType::F32, &[n / CHUNK_ROWS])?
        };
        // The streamed kernel takes the register kernel's arguments.
        let (kernel, grid) = match self
            .streamed_norm_stage
            .as_ref()
            .and_then(|streamed| streamed.plan(n, k, weight.shape()[1]))
        {
            Some((kernel, grid)) => (kernel, grid),
            None => (
                &self.matvec_add_norm_stage,
                LaunchGrid {
                    blocks: [(n / CHUNK_ROWS) as u32, 1, 1],
                    threads_per_block: [NORM_STAGE_THREADS, 1, 1],
                    shared_memory_bytes: 0,
                },
            ),
        };
        let bytes_read =
            (n * blocks * self.format.block_bytes() + staged_bytes(k)) as u64 + bytes_of(2 * n, DType::F32);
        let bytes_written = bytes_of(n + n / CHUNK_ROWS, DType::F32) + staged_bytes(n) as u64;
        encoder.dispatch(
            Arguments::new(arguments::ARGUMENTS)
                .buffer(arguments::WEIGHT, weight)
                .buffer(arguments::X, &staged.buffer)
                .buffer(arguments::OUT, out)
                .scalar(arguments::N, n as u32)
                .scalar(arguments::K, k as u32)
                .buffer(arguments::NORM_WEIGHT, norm_weight)
                .buffer(arguments::STAGED, &output)
                .buffer(arguments::SQUARES, &squares)
                .dispatch(kernel)?
                .grid(grid)
                .cost(bytes_read, bytes_written, 2 * (n * k) as u64 + 6 * n as u64)
                .op_kind(OpKind::fused(&[Primitive::MatVec, Primitive::ElemAdd])),
        )?;
        Ok(StagedInput {
            buffer: output,
            length: n,
            pending_norm: Some(PendingNorm { squares, eps }),
        })
    }
}
