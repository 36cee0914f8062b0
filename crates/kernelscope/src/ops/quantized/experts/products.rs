//! The quantized experts' two products, each after its input's
//! quantization: gate/up + SiLU·mul (with decode's RMSNorm fused into the
//! quantization on CUDA) and down weighted into the residual stream.

use super::{MOST_BLOCKS, MoeQuantized, WARPS, down, gate_up};
use crate::error::{Error, Result};
use crate::ops::quantized::linear::CUDA_THREADS;
use crate::ops::quantized::linear::fused::stage_input;
use crate::ops::{Arguments, bytes_of, expect_rows, rows_of};
use crate::runtime::{Buffer, CommandEncoder, DType, LaunchGrid, OpKind, Primitive};

/// A gate/up product's sizes.
#[derive(Clone, Copy, Debug)]
struct GateUpShape {
    experts: usize,
    expert_rows: usize,
    hidden: usize,
    rows: usize,
    k: usize,
}

impl MoeQuantized {
    /// `out[row, j] = silu(gate[e] · x[row]) * (up[e] · x[row])`, `e =
    /// ids[row, j]`, for gate and up u8 `[experts, expert_rows, row_bytes]`
    /// of this format, x f32 `[rows, hidden]`, ids u32 `[rows, k]`, out f32
    /// `[rows, k, expert_rows]`. An id past the experts gives zeros.
    pub fn encode_gate_up(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        ids: &Buffer,
        gate: &Buffer,
        up: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        const OP: &str = "moe_gate_up (quantized)";
        let shape = self.gate_up_shape(OP, x, ids, gate, up, out)?;
        let staged = self.encode_stage(encoder, OP, x, &self.staged_input, shape.hidden)?;
        self.dispatch_gate_up(encoder, &staged, ids, gate, up, out, shape)
    }

    /// Whether [`MoeQuantized::encode_norm_gate_up`] runs on this device.
    pub fn fuses_norm(&self) -> bool {
        self.norm_quantize.is_some()
    }

    /// [`MoeQuantized::encode_gate_up`] of `rmsnorm(x) * norm_weight` for
    /// one row (decode): the norm fused into the input's quantization
    /// (`norm_quantize_q8`), so it is never a dispatch of its own.
    #[allow(clippy::too_many_arguments)]
    pub fn encode_norm_gate_up(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        norm_weight: &Buffer,
        eps: f32,
        ids: &Buffer,
        gate: &Buffer,
        up: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        const OP: &str = "moe_norm_gate_up (quantized)";
        let shape = self.gate_up_shape(OP, x, ids, gate, up, out)?;
        let hidden = shape.hidden;
        let kernel = self.norm_quantize.as_ref().ok_or_else(|| Error::KernelMissing {
            name: "norm_quantize_q8".into(),
            backend: encoder.device().backend(),
            workaround: "run the RMSNorm apart (kscope run --unfused)".into(),
            remedies: &[],
        })?;
        let norm = Some((norm_weight, eps));
        let staged = stage_input(encoder, OP, x, hidden, kernel, norm, &self.staged_input)?;
        self.dispatch_gate_up(encoder, &staged, ids, gate, up, out, shape)
    }

    /// Checks a gate/up product's operands and gives its shape.
    fn gate_up_shape(
        &self,
        op: &str,
        x: &Buffer,
        ids: &Buffer,
        gate: &Buffer,
        up: &Buffer,
        out: &Buffer,
    ) -> Result<GateUpShape> {
        let (experts, expert_rows, hidden) = self.stacked(op, "gate", gate)?;
        if self.stacked(op, "up", up)? != (experts, expert_rows, hidden) {
            return Err(Error::ShapeMismatch {
                context: format!("{op}: the up projection's shape differs from the gate's"),
                expected: gate.shape().to_vec(),
                found: up.shape().to_vec(),
            });
        }
        let rows = rows_of(op, "x", x, hidden)?;
        expect_rows(op, "x", x, DType::F32, rows, &[hidden])?;
        let k = rows_of(op, "ids", ids, rows)?;
        expect_rows(op, "ids", ids, DType::U32, rows, &[k])?;
        expect_rows(op, "output", out, DType::F32, rows * k, &[expert_rows])?;
        Ok(GateUpShape {
            experts,
            expert_rows,
            hidden,
            rows,
            k,
        })
    }

    /// The gate/up product over x already in `staged`.
    #[allow(clippy::too_many_arguments)]
    fn dispatch_gate_up(
        &self,
        encoder: &mut CommandEncoder,
        staged: &Buffer,
        ids: &Buffer,
        gate: &Buffer,
        up: &Buffer,
        out: &Buffer,
        GateUpShape {
            experts,
            expert_rows,
            hidden,
            rows,
            k,
        }: GateUpShape,
    ) -> Result<()> {
        let chosen = rows * k;
        encoder.dispatch(
            Arguments::new(gate_up::ARGUMENTS)
                .buffer(gate_up::X, staged)
                .buffer(gate_up::IDS, ids)
                .buffer(gate_up::GATE, gate)
                .buffer(gate_up::UP, up)
                .buffer(gate_up::OUT, out)
                .scalar(gate_up::ROWS, rows as u32)
                .scalar(gate_up::HIDDEN_SIZE, hidden as u32)
                .scalar(gate_up::EXPERT_ROWS, expert_rows as u32)
                .scalar(gate_up::EXPERTS, experts as u32)
                .scalar(gate_up::K, k as u32)
                .dispatch(&self.gate_up)?
                .grid(self.grid(expert_rows, k, rows))
                // Each row reads its k experts' blocks: what a decode
                // token's roofline counts.
                .cost(
                    (chosen * 2 * expert_rows * self.format.row_bytes(hidden).unwrap_or(0)
                        + staged.byte_len()) as u64
                        + bytes_of(chosen, DType::U32),
                    bytes_of(chosen * expert_rows, DType::F32),
                    (chosen * expert_rows * (4 * hidden + 5)) as u64,
                )
                .op_kind(OpKind::fused(&[Primitive::MatVec, Primitive::SiluMul]))
                .role(crate::profile::Role::Experts),
        )
    }

    /// `hidden[row] += Σ_j weights[row, j] · (down[e_j] · activated[row,
    /// j])`, `e_j = ids[row, j]`, for down u8 `[experts, hidden_size,
    /// row_bytes]` of this format, activated f32 `[rows, k, expert_rows]`,
    /// ids u32 and weights f32 `[rows, k]`, hidden f32 `[rows, hidden_size]`.
    #[allow(clippy::too_many_arguments)]
    pub fn encode_down_add(
        &self,
        encoder: &mut CommandEncoder,
        activated: &Buffer,
        ids: &Buffer,
        weights: &Buffer,
        down: &Buffer,
        hidden: &Buffer,
    ) -> Result<()> {
        const OP: &str = "moe_down_add (quantized)";
        let (experts, hidden_size, expert_rows) = self.stacked(OP, "down", down)?;
        let rows = rows_of(OP, "hidden", hidden, hidden_size)?;
        expect_rows(OP, "hidden", hidden, DType::F32, rows, &[hidden_size])?;
        let k = rows_of(OP, "ids", ids, rows)?;
        expect_rows(OP, "ids", ids, DType::U32, rows, &[k])?;
        expect_rows(OP, "weights", weights, DType::F32, rows, &[k])?;
        expect_rows(OP, "activated", activated, DType::F32, rows * k, &[expert_rows])?;
        let staged = self.encode_stage(encoder, OP, activated, &self.staged_activated, expert_rows)?;
        let chosen = rows * k;
        encoder.dispatch(
            Arguments::new(down::ARGUMENTS)
                .buffer(down::ACTIVATED, &staged)
                .buffer(down::IDS, ids)
                .buffer(down::WEIGHTS, weights)
                .buffer(down::DOWN, down)
                .buffer(down::HIDDEN, hidden)
                .scalar(down::ROWS, rows as u32)
                .scalar(down::HIDDEN_SIZE, hidden_size as u32)
                .scalar(down::EXPERT_ROWS, expert_rows as u32)
                .scalar(down::EXPERTS, experts as u32)
                .scalar(down::K, k as u32)
                .dispatch(&self.down)?
                .grid(LaunchGrid {
                    blocks: [
                        hidden_size.div_ceil(WARPS).clamp(1, MOST_BLOCKS) as u32,
                        rows as u32,
                        1,
                    ],
                    threads_per_block: [CUDA_THREADS, 1, 1],
                    shared_memory_bytes: 0,
                })
                .cost(
                    (chosen * hidden_size * self.format.row_bytes(expert_rows).unwrap_or(0)
                        + staged.byte_len()) as u64
                        + bytes_of(chosen, DType::U32)
                        + bytes_of(chosen, DType::F32)
                        + bytes_of(rows * hidden_size, DType::F32),
                    bytes_of(rows * hidden_size, DType::F32),
                    (chosen * hidden_size * (2 * expert_rows + 2)) as u64,
                )
                .op_kind(OpKind::fused(&[Primitive::MatVec, Primitive::ElemAdd]))
                .role(crate::profile::Role::Experts),
        )
    }

    /// The gate/up grid: row groups of an expert across (a warp a row of
    /// both matrices), each row's k choices, the rows.
    fn grid(&self, expert_rows: usize, k: usize, rows: usize) -> LaunchGrid {
        LaunchGrid {
            blocks: [
                expert_rows.div_ceil(WARPS).clamp(1, MOST_BLOCKS) as u32,
                k as u32,
                rows as u32,
            ],
            threads_per_block: [CUDA_THREADS, 1, 1],
            shared_memory_bytes: 0,
        }
    }
}
