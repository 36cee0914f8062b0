//! `out[p] = x[order[p]]`: a chunk's rows copied into runs grouped by
//! expert, each run one GEMM's input.

use super::cpu::{moe_gather, moe_gather_narrow};
use crate::error::Result;
use crate::ops::{Arguments, bytes_of, expect_rows, kernel_for, register_weight_kernels, rows_of};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

pub(crate) use super::arguments::gather::{ARGUMENTS, ORDER, OUT, POSITIONS, WIDTH, X};

/// Registers `moe_gather_<dtype>` and `moe_gather_narrow_bf16` (f32 rows
/// into bf16 runs).
pub(super) fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(registry, "moe_gather", moe_gather, include_str!("gather.cu"));
    registry.register_cpu("moe_gather_narrow_bf16", moe_gather_narrow);
    registry.register_cuda_source(
        "moe_gather_narrow_bf16",
        crate::ops::cuda_source(include_str!("gather.cu")),
    );
    registry.register_format("moe_gather_narrow_bf16", "bf16");
}

/// The gather for rows of one dtype.
#[derive(Clone, Debug)]
pub struct MoeGather {
    kernel: Kernel,
    /// The rows' dtype.
    input: DType,
    /// The runs' dtype.
    output: DType,
}

impl MoeGather {
    /// The op for rows of `dtype` on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, dtype: DType) -> Result<Self> {
        Ok(MoeGather {
            kernel: kernel_for(registry, device, "moe_gather", dtype)?,
            input: dtype,
            output: dtype,
        })
    }

    /// The op copying f32 rows into bf16 runs (rounded to nearest even).
    pub fn narrow(registry: &KernelRegistry, device: &Device) -> Result<Self> {
        Ok(MoeGather {
            kernel: registry.kernel(device, "moe_gather_narrow_bf16")?,
            input: DType::F32,
            output: DType::BF16,
        })
    }

    /// `out[p] = x[order[p]]` for x `[rows, width]`, order u32 `[positions]`
    /// (each below `rows`, not checked: the host made it), out `[positions,
    /// width]` (x and out in the op's dtypes).
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        order: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        const OP: &str = "moe_gather";
        let positions = order.len();
        expect_rows(OP, "order", order, DType::U32, positions, &[])?;
        let width = rows_of(OP, "output", out, positions)?;
        expect_rows(OP, "output", out, self.output, positions, &[width])?;
        let rows = rows_of(OP, "x", x, width)?;
        expect_rows(OP, "x", x, self.input, rows, &[width])?;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(X, x)
                .buffer(ORDER, order)
                .buffer(OUT, out)
                .scalar(POSITIONS, positions as u32)
                .scalar(WIDTH, width as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid {
                    blocks: [positions.max(1) as u32, 1, 1],
                    threads_per_block: [256, 1, 1],
                    shared_memory_bytes: 0,
                })
                .cost(
                    bytes_of(positions * width, self.input) + bytes_of(positions, DType::U32),
                    bytes_of(positions * width, self.output),
                    0,
                )
                .op_kind(OpKind::Copy)
                .role(crate::profile::Role::Experts),
        )
    }
}
