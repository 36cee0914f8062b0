//! Matrix times vector, the decode-time projection: `out[n] = W[n, k] · x[k]`
//! with W in the checkpoint's dtype and f32 accumulation. It dominates a
//! decode step (every weight byte is read once per token), so the CPU
//! version splits rows across threads. `residual` is the same mat-vec with
//! the residual add in its epilogue; the RMSNorm-fused forms live in
//! `ops::norm_matvec` and share this folder's CUDA core (`rows.cuh`).

mod arguments;
mod cpu;
pub mod residual;
pub(crate) use arguments::{ARGUMENTS, K, N, OUT, THREADS, WEIGHT, X};
use arguments::{MOST_BLOCKS, WARPS};

use super::{Arguments, bytes_of, dimensions, expect, kernel_for, register_weight_kernels};
use crate::error::Result;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

use cpu::matvec;

/// Registers `matvec_<dtype>`.
pub fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(registry, "matvec", matvec, &with_core(include_str!("matvec.cu")));
}

/// The shared mat-vec core (`rows.cuh`) followed by one kernel file: what
/// every mat-vec kernel, fused or not, is compiled from.
pub(crate) fn with_core(kernel_source: &str) -> String {
    format!("{}\n{kernel_source}", include_str!("rows.cuh"))
}

/// Warps sharing one row of a matrix of `rows` rows (`warps_per_row` in
/// `rows.cuh`, which can split a row's k over several warps): one, since
/// the split measured slower on an H200 (docs/PERF.md).
pub(crate) fn warps_per_row(_rows: usize) -> usize {
    1
}

/// The grid for `rows` rows: one group of rows per block (a row per warp,
/// or per few warps), or, past `most_blocks` blocks, that many blocks
/// walking the groups grid-stride (the kernels loop).
pub(crate) fn grid(rows: usize, most_blocks: usize, shared_memory_bytes: u32) -> LaunchGrid {
    let rows_per_block = WARPS / warps_per_row(rows);
    LaunchGrid {
        blocks: [rows.div_ceil(rows_per_block).clamp(1, most_blocks) as u32, 1, 1],
        threads_per_block: [THREADS, 1, 1],
        shared_memory_bytes,
    }
}

/// The bytes read, bytes written and flops of `out[n] = W[n, k] · x[k]`
/// with weights of `dtype`.
pub(crate) fn cost(n: usize, k: usize, dtype: DType) -> (u64, u64, u64) {
    (
        bytes_of(n * k, dtype) + bytes_of(k, DType::F32),
        bytes_of(n, DType::F32),
        2 * (n * k) as u64,
    )
}

/// The mat-vec op for one weight dtype.
#[derive(Clone, Debug)]
pub struct MatVec {
    kernel: Kernel,
    dtype: DType,
}

impl MatVec {
    /// The op for weights of `dtype` on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, dtype: DType) -> Result<Self> {
        Ok(MatVec {
            kernel: kernel_for(registry, device, "matvec", dtype)?,
            dtype,
        })
    }

    /// `out[n] = weight[n, k] · x[k]`.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        weight: &Buffer,
        x: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        let (dispatch, [n, k]) =
            checked_dispatch("matvec", ARGUMENTS, &self.kernel, self.dtype, weight, x, out)?;
        let (read, written, flops) = cost(n, k, self.dtype);
        encoder.dispatch(dispatch.cost(read, written, flops).op_kind(OpKind::MatVec))
    }
}

/// The checked operands of a mat-vec (`weight` `[n, k]` of `dtype`, `x`
/// f32 `[k]`, `out` f32 `[n]`) placed by `declared` (the plain or the
/// residual list, which share positions) into a dispatch of `kernel` on the
/// mat-vec grid, with `[n, k]`; the caller adds the cost and op kind.
pub(crate) fn checked_dispatch(
    op: &str,
    declared: &'static [crate::ops::Argument],
    kernel: &Kernel,
    dtype: DType,
    weight: &Buffer,
    x: &Buffer,
    out: &Buffer,
) -> Result<(crate::runtime::Dispatch, [usize; 2])> {
    let [n, k] = dimensions(op, "weight", weight)?;
    expect(op, "weight", weight, dtype, &[n, k])?;
    expect(op, "input", x, DType::F32, &[k])?;
    expect(op, "output", out, DType::F32, &[n])?;
    let dispatch = Arguments::new(declared)
        .buffer(WEIGHT, weight)
        .buffer(X, x)
        .buffer(OUT, out)
        .scalar(N, n as u32)
        .scalar(K, k as u32)
        .dispatch(kernel)?
        .grid(grid(n, MOST_BLOCKS, 0));
    Ok((dispatch, [n, k]))
}
