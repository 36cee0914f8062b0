//! The chosen experts' down projections and their weighted sum, added into
//! the residual stream in one dispatch: `hidden[row] += Σ_j weights[row, j]
//! · (down[e_j] · activated[row, j])`, `e_j = ids[row, j]`.

use super::cpu::moe_down_add;
use crate::error::Result;
use crate::ops::matvec::{THREADS, with_core};
use crate::ops::{Arguments, bytes_of, expect, expect_rows, kernel_for, register_weight_kernels, rows_of};
use crate::runtime::{
    Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind, Primitive,
};

pub(crate) use super::arguments::down::{
    ACTIVATED, ARGUMENTS, DOWN, EXPERT_ROWS, EXPERTS, HIDDEN, HIDDEN_SIZE, IDS, K, ROWS, SLICES, WEIGHTS,
};

/// Blocks along the hidden rows at most (the kernel walks the rest).
const MOST_BLOCKS: usize = 4096;

/// Warps the kernel should have in all for its loads to keep the memory
/// busy (about 62 per SM of an H100/H200): a row's k expert rows are split
/// between several warps where output rows are fewer.
const WARPS_WANTED: usize = 8192;

/// Warps sharing one output row of `hidden_size` rows for `rows` input
/// rows: 1, 2, 4 or 8 (a block's 8 warps hold whole rows).
pub(crate) fn slices(hidden_size: usize, rows: usize) -> usize {
    let wanted = WARPS_WANTED / (hidden_size * rows).max(1);
    [8, 4, 2]
        .into_iter()
        .find(|&slices| wanted >= slices)
        .unwrap_or(1)
}

/// Registers `moe_down_add_<dtype>`.
pub(super) fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(
        registry,
        "moe_down_add",
        moe_down_add,
        &with_core(include_str!("down.cu"))
    );
}

/// The experts' down-and-add op for one weight dtype.
#[derive(Clone, Debug)]
pub struct MoeDownAdd {
    kernel: Kernel,
    dtype: DType,
}

impl MoeDownAdd {
    /// The op for expert weights of `dtype` on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, dtype: DType) -> Result<Self> {
        Ok(MoeDownAdd {
            kernel: kernel_for(registry, device, "moe_down_add", dtype)?,
            dtype,
        })
    }

    /// `hidden[row] += Σ_j weights[row, j] · (down[e_j] · activated[row,
    /// j])` for down `[experts, hidden, expert_rows]`, activated f32 `[rows,
    /// k, expert_rows]`, ids u32 and weights f32 `[rows, k]`, hidden f32
    /// `[rows, hidden]`.
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        activated: &Buffer,
        ids: &Buffer,
        weights: &Buffer,
        down: &Buffer,
        hidden: &Buffer,
    ) -> Result<()> {
        const OP: &str = "moe_down_add";
        let [experts, hidden_size, expert_rows] = crate::ops::dimensions(OP, "down", down)?;
        expect(OP, "down", down, self.dtype, &[experts, hidden_size, expert_rows])?;
        let rows = rows_of(OP, "hidden", hidden, hidden_size)?;
        expect_rows(OP, "hidden", hidden, DType::F32, rows, &[hidden_size])?;
        let k = rows_of(OP, "ids", ids, rows)?;
        expect_rows(OP, "ids", ids, DType::U32, rows, &[k])?;
        expect_rows(OP, "weights", weights, DType::F32, rows, &[k])?;
        expect_rows(OP, "activated", activated, DType::F32, rows * k, &[expert_rows])?;
        let slices = slices(hidden_size, rows);
        let row_groups = (hidden_size * slices)
            .div_ceil(THREADS as usize / 32)
            .clamp(1, MOST_BLOCKS);
        let chosen = rows * k;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(ACTIVATED, activated)
                .buffer(IDS, ids)
                .buffer(WEIGHTS, weights)
                .buffer(DOWN, down)
                .buffer(HIDDEN, hidden)
                .scalar(ROWS, rows as u32)
                .scalar(HIDDEN_SIZE, hidden_size as u32)
                .scalar(EXPERT_ROWS, expert_rows as u32)
                .scalar(EXPERTS, experts as u32)
                .scalar(K, k as u32)
                .scalar(SLICES, slices as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid {
                    blocks: [row_groups as u32, rows as u32, 1],
                    threads_per_block: [THREADS, 1, 1],
                    shared_memory_bytes: 0,
                })
                .cost(
                    bytes_of(chosen * hidden_size * expert_rows, self.dtype)
                        + bytes_of(chosen * expert_rows, DType::F32)
                        + bytes_of(chosen, DType::U32)
                        + bytes_of(chosen, DType::F32)
                        + bytes_of(rows * hidden_size, DType::F32),
                    bytes_of(rows * hidden_size, DType::F32),
                    (chosen * hidden_size * (2 * expert_rows + 1)) as u64,
                )
                .op_kind(OpKind::fused(&[Primitive::MatVec, Primitive::ElemAdd]))
                .role(crate::profile::Role::Experts),
        )
    }
}
