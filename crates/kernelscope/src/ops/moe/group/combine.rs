//! `hidden[row] += Σ_j weights[row, j] · expert_out[position[row, j]]`:
//! each row's k expert outputs, from their places in the grouped runs,
//! weighted into the residual stream.

use super::cpu::moe_combine;
use crate::error::Result;
use crate::ops::{Arguments, bytes_of, expect_rows, rows_of};
use crate::runtime::{
    Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind, Primitive,
};

pub(crate) use super::arguments::combine::{
    ARGUMENTS, EXPERT_OUT, HIDDEN, K, POSITION, ROWS, WEIGHTS, WIDTH,
};

/// Registers `moe_combine_f32`.
pub(super) fn register(registry: &mut KernelRegistry) {
    registry.register_cpu("moe_combine_f32", moe_combine);
    registry.register_cuda_source(
        "moe_combine_f32",
        crate::ops::cuda_source(include_str!("combine.cu")),
    );
    registry.register_format("moe_combine_f32", "f32");
}

/// The weighted combine of the experts' outputs.
#[derive(Clone, Debug)]
pub struct MoeCombine {
    kernel: Kernel,
}

impl MoeCombine {
    /// The op on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device) -> Result<Self> {
        Ok(MoeCombine {
            kernel: registry.kernel(device, "moe_combine_f32")?,
        })
    }

    /// `hidden[row] += Σ_j weights[row, j] · expert_out[position[row, j]]`
    /// for hidden f32 `[rows, width]`, position u32 and weights f32 `[rows,
    /// k]`, expert_out f32 `[rows · k, width]` (positions not checked: the
    /// host made them).
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        expert_out: &Buffer,
        position: &Buffer,
        weights: &Buffer,
        hidden: &Buffer,
    ) -> Result<()> {
        const OP: &str = "moe_combine";
        let rows_times_k = position.len();
        let width = rows_of(OP, "expert outputs", expert_out, rows_times_k)?;
        expect_rows(
            OP,
            "expert outputs",
            expert_out,
            DType::F32,
            rows_times_k,
            &[width],
        )?;
        let rows = rows_of(OP, "hidden", hidden, width)?;
        expect_rows(OP, "hidden", hidden, DType::F32, rows, &[width])?;
        let k = rows_of(OP, "position", position, rows)?;
        expect_rows(OP, "position", position, DType::U32, rows, &[k])?;
        expect_rows(OP, "weights", weights, DType::F32, rows, &[k])?;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(EXPERT_OUT, expert_out)
                .buffer(POSITION, position)
                .buffer(WEIGHTS, weights)
                .buffer(HIDDEN, hidden)
                .scalar(ROWS, rows as u32)
                .scalar(WIDTH, width as u32)
                .scalar(K, k as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid {
                    blocks: [rows.max(1) as u32, 1, 1],
                    threads_per_block: [256, 1, 1],
                    shared_memory_bytes: 0,
                })
                .cost(
                    bytes_of(rows_times_k * width + rows * width + 2 * rows_times_k, DType::F32),
                    bytes_of(rows * width, DType::F32),
                    (2 * rows_times_k * width) as u64,
                )
                .op_kind(OpKind::fused(&[Primitive::ElemMul, Primitive::ElemAdd]))
                .role(crate::profile::Role::Experts),
        )
    }
}
