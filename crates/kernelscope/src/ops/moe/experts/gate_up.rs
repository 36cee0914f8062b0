//! The chosen experts' gate and up projections and SiLU·mul, one dispatch:
//! `out[row, j] = silu(gate[e] · x[row]) * (up[e] · x[row])` for each row
//! and each of its k experts `e = ids[row, j]`.

use super::common::{check_gate_up, gate_up_grid, gate_up_source};
use super::cpu::moe_gate_up;
use crate::error::Result;
use crate::ops::{Arguments, bytes_of, expect_rows, kernel_for, rows_of};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, OpKind, Primitive};

pub(crate) use super::arguments::gate_up::{
    ARGUMENTS, EXPERT_ROWS, EXPERTS, GATE, HIDDEN_SIZE, IDS, K, OUT, ROWS, UP, X,
};

/// Registers the kernels of every weight dtype, with x in f32 and narrow.
pub(super) fn register(registry: &mut KernelRegistry) {
    let source: std::sync::Arc<str> =
        crate::ops::cuda_source(&gate_up_source(include_str!("gate_up.cu"))).into();
    registry.register_cpu("moe_gate_up_f32", moe_gate_up::<f32, f32>);
    registry.register_cpu("moe_gate_up_f16", moe_gate_up::<half::f16, f32>);
    registry.register_cpu("moe_gate_up_bf16", moe_gate_up::<half::bf16, f32>);
    registry.register_cpu("moe_gate_up_narrow_f32", moe_gate_up::<f32, f32>);
    registry.register_cpu("moe_gate_up_narrow_f16", moe_gate_up::<half::f16, half::f16>);
    registry.register_cpu("moe_gate_up_narrow_bf16", moe_gate_up::<half::bf16, half::bf16>);
    for dtype in ["f32", "f16", "bf16"] {
        registry.register_cuda_source(&format!("moe_gate_up_{dtype}"), source.clone());
        registry.register_cuda_source(&format!("moe_gate_up_narrow_{dtype}"), source.clone());
        registry.register_format(&format!("moe_gate_up_{dtype}"), dtype);
        registry.register_format(&format!("moe_gate_up_narrow_{dtype}"), dtype);
    }
}

/// The experts' gate/up op for one weight dtype.
#[derive(Clone, Debug)]
pub struct MoeGateUp {
    wide: Kernel,
    narrow: Kernel,
    dtype: DType,
}

impl MoeGateUp {
    /// The op for expert weights of `dtype` on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, dtype: DType) -> Result<Self> {
        Ok(MoeGateUp {
            wide: kernel_for(registry, device, "moe_gate_up", dtype)?,
            narrow: kernel_for(registry, device, "moe_gate_up_narrow", dtype)?,
            dtype,
        })
    }

    /// `out[row, j] = silu(gate[e] · x[row]) * (up[e] · x[row])`, `e =
    /// ids[row, j]`, for gate and up `[experts, expert_rows, hidden]`, x
    /// `[rows, hidden]` (f32 or the weights' dtype), ids u32 `[rows, k]`,
    /// out f32 `[rows, k, expert_rows]`.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        ids: &Buffer,
        gate: &Buffer,
        up: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        const OP: &str = "moe_gate_up";
        let [experts, expert_rows, hidden] = check_gate_up(OP, gate, up, self.dtype)?;
        let rows = rows_of(OP, "x", x, hidden)?;
        let kernel = if x.dtype() == DType::F32 {
            &self.wide
        } else {
            &self.narrow
        };
        expect_rows(
            OP,
            "x",
            x,
            if x.dtype() == DType::F32 {
                DType::F32
            } else {
                self.dtype
            },
            rows,
            &[hidden],
        )?;
        let k = rows_of(OP, "ids", ids, rows)?;
        expect_rows(OP, "ids", ids, DType::U32, rows, &[k])?;
        expect_rows(OP, "output", out, DType::F32, rows * k, &[expert_rows])?;
        let chosen = rows * k;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(X, x)
                .buffer(IDS, ids)
                .buffer(GATE, gate)
                .buffer(UP, up)
                .buffer(OUT, out)
                .scalar(ROWS, rows as u32)
                .scalar(HIDDEN_SIZE, hidden as u32)
                .scalar(EXPERT_ROWS, expert_rows as u32)
                .scalar(EXPERTS, experts as u32)
                .scalar(K, k as u32)
                .dispatch(kernel)?
                .grid(gate_up_grid(expert_rows, k, rows, hidden))
                // Each row reads its k experts' rows: the bytes of the
                // weights it touched, as a decode token's roofline wants.
                .cost(
                    bytes_of(chosen * 2 * expert_rows * hidden, self.dtype)
                        + bytes_of(rows * hidden, x.dtype())
                        + bytes_of(chosen, DType::U32),
                    bytes_of(chosen * expert_rows, DType::F32),
                    (chosen * expert_rows * (4 * hidden + 5)) as u64,
                )
                .op_kind(OpKind::fused(&[Primitive::MatVec, Primitive::SiluMul]))
                .role(crate::profile::Role::Experts),
        )
    }
}
