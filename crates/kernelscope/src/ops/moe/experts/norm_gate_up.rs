//! The experts' gate/up + SiLU·mul with the RMSNorm before them fused in:
//! `out[row, j] = silu(gate[e] · h) * (up[e] · h)`, `h = rmsnorm(x[row]) *
//! norm_weight`, `e = ids[row, j]`. With it a sparse layer's decode has no
//! separate norm dispatch (the router's fused mat-vec normalises x too).

use super::common::{check_gate_up, gate_up_grid, gate_up_source};
use super::cpu::moe_norm_gate_up;
use crate::error::Result;
use crate::ops::{Arguments, bytes_of, expect, expect_rows, kernel_for, register_weight_kernels, rows_of};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, OpKind, Primitive};

pub(crate) use super::arguments::norm_gate_up::{
    ARGUMENTS, EPS, EXPERT_ROWS, EXPERTS, GATE, HIDDEN_SIZE, IDS, K, NORM_WEIGHT, OUT, ROWS, UP, X,
};

/// Registers `moe_norm_gate_up_<dtype>`.
pub(super) fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(
        registry,
        "moe_norm_gate_up",
        moe_norm_gate_up,
        &gate_up_source(include_str!("norm_gate_up.cu"))
    );
}

/// The fused RMSNorm and experts' gate/up op for one weight dtype.
#[derive(Clone, Debug)]
pub struct MoeNormGateUp {
    kernel: Kernel,
    dtype: DType,
}

impl MoeNormGateUp {
    /// The op for expert weights of `dtype` on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, dtype: DType) -> Result<Self> {
        Ok(MoeNormGateUp {
            kernel: kernel_for(registry, device, "moe_norm_gate_up", dtype)?,
            dtype,
        })
    }

    /// `out[row, j] = silu(gate[e] · h) * (up[e] · h)`, `h = rmsnorm(x[row],
    /// eps) * norm_weight`, `e = ids[row, j]`, for gate and up `[experts,
    /// expert_rows, hidden]`, x f32 `[rows, hidden]`, ids u32 `[rows, k]`,
    /// out f32 `[rows, k, expert_rows]`.
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        norm_weight: &Buffer,
        ids: &Buffer,
        gate: &Buffer,
        up: &Buffer,
        out: &Buffer,
        eps: f32,
    ) -> Result<()> {
        const OP: &str = "moe_norm_gate_up";
        let [experts, expert_rows, hidden] = check_gate_up(OP, gate, up, self.dtype)?;
        expect(OP, "norm weight", norm_weight, self.dtype, &[hidden])?;
        let rows = rows_of(OP, "x", x, hidden)?;
        expect_rows(OP, "x", x, DType::F32, rows, &[hidden])?;
        let k = rows_of(OP, "ids", ids, rows)?;
        expect_rows(OP, "ids", ids, DType::U32, rows, &[k])?;
        expect_rows(OP, "output", out, DType::F32, rows * k, &[expert_rows])?;
        let chosen = rows * k;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(X, x)
                .buffer(NORM_WEIGHT, norm_weight)
                .buffer(IDS, ids)
                .buffer(GATE, gate)
                .buffer(UP, up)
                .buffer(OUT, out)
                .scalar(ROWS, rows as u32)
                .scalar(HIDDEN_SIZE, hidden as u32)
                .scalar(EXPERT_ROWS, expert_rows as u32)
                .scalar(EXPERTS, experts as u32)
                .scalar(K, k as u32)
                .scalar(EPS, eps)
                .dispatch(&self.kernel)?
                .grid(gate_up_grid(expert_rows, k, rows, hidden))
                .cost(
                    bytes_of(chosen * 2 * expert_rows * hidden, self.dtype)
                        + bytes_of(rows * hidden, DType::F32)
                        + bytes_of(hidden, self.dtype)
                        + bytes_of(chosen, DType::U32),
                    bytes_of(chosen * expert_rows, DType::F32),
                    (chosen * expert_rows * (4 * hidden + 5) + rows * 4 * hidden) as u64,
                )
                .op_kind(OpKind::fused(&[
                    Primitive::RmsNorm,
                    Primitive::MatVec,
                    Primitive::SiluMul,
                ]))
                .role(crate::profile::Role::Experts),
        )
    }
}
