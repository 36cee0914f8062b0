//! RMSNorm fused into the mat-vecs that read it, for decode: `out = [A; B;
//! C] · (rmsnorm(x) * norm_weight)` over up to three weight matrices read as
//! one (q_proj, k_proj and v_proj in one dispatch; the LM head alone), and,
//! in `silu`, the gate and up projections with SiLU·mul in the epilogue;
//! in `rope`, q/k/v with RoPE and the KV-cache append in their stores.
//!
//! Each block normalises x into shared memory before its warps stream
//! weight rows, so x must fit there: `k` floats within
//! [`MOST_SHARED_BYTES`] ([`fits`]). Larger hidden sizes take the unfused
//! ops. The CPU reference is the composition of the RMSNorm and mat-vec
//! references, which is what the fused kernels are tested against.

mod arguments;
mod cpu;
pub mod rope;
pub mod silu;
use arguments::MOST_BLOCKS;
pub(crate) use arguments::{
    ARGUMENTS, EPS, K, NORM_WEIGHT, OUT, ROWS_A, ROWS_B, ROWS_C, WEIGHT_A, WEIGHT_B, WEIGHT_C, X,
};
pub use arguments::{MOST_SHARED_BYTES, STATIC_SHARED_BYTES};

use super::matvec::{cost, grid, with_core};
use super::{Arguments, bytes_of, dimensions, expect, kernel_for, register_weight_kernels};
use crate::error::{Error, Result};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, OpKind, Primitive};

use cpu::norm_matvec;

/// Whether rows of `k` elements can be normalised in shared memory.
pub fn fits(k: usize) -> bool {
    k > 0 && 4 * k + STATIC_SHARED_BYTES <= MOST_SHARED_BYTES
}

/// Registers `norm_matvec_<dtype>`.
pub fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(
        registry,
        "norm_matvec",
        norm_matvec,
        &with_core(include_str!("norm_matvec.cu"))
    );
}

/// Checks what both fused ops share: x f32 `[k]`, the norm weight `[k]` in
/// the weights' dtype, and `k` small enough for shared memory.
fn check_normed_input(op: &str, x: &Buffer, norm_weight: &Buffer, dtype: DType, k: usize) -> Result<()> {
    expect(op, "input", x, DType::F32, &[k])?;
    expect(op, "norm weight", norm_weight, dtype, &[k])?;
    if !fits(k) {
        return Err(Error::ShapeMismatch {
            context: format!(
                "{op} normalises rows of at most {} elements in shared memory; use the RMSNorm and mat-vec ops",
                (MOST_SHARED_BYTES - STATIC_SHARED_BYTES) / 4
            ),
            expected: vec![(MOST_SHARED_BYTES - STATIC_SHARED_BYTES) / 4],
            found: vec![k],
        });
    }
    Ok(())
}

/// The fused RMSNorm and mat-vec op for one weight dtype.
#[derive(Clone, Debug)]
pub struct NormMatVec {
    kernel: Kernel,
    dtype: DType,
}

impl NormMatVec {
    /// The op for weights of `dtype` on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, dtype: DType) -> Result<Self> {
        Ok(NormMatVec {
            kernel: kernel_for(registry, device, "norm_matvec", dtype)?,
            dtype,
        })
    }

    /// `out = [weights[0]; weights[1]; ...] · (rmsnorm(x, eps) * norm_weight)`
    /// for one to three weight matrices `[rows_i, k]`; `out` f32 holds the
    /// rows of all of them in order.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        norm_weight: &Buffer,
        weights: &[&Buffer],
        out: &Buffer,
        eps: f32,
    ) -> Result<()> {
        const OP: &str = "norm_matvec";
        let (first, rest) = weights.split_first().ok_or_else(|| Error::ShapeMismatch {
            context: format!("{OP} takes one to three weight matrices"),
            expected: vec![1],
            found: vec![0],
        })?;
        if rest.len() > 2 {
            return Err(Error::ShapeMismatch {
                context: format!("{OP} takes one to three weight matrices"),
                expected: vec![3],
                found: vec![weights.len()],
            });
        }
        let [_, k] = dimensions(OP, "weight", first)?;
        let mut rows = [0usize; 3];
        for (slot, weight) in weights.iter().enumerate() {
            let [n, _] = dimensions(OP, "weight", weight)?;
            expect(OP, "weight", weight, self.dtype, &[n, k])?;
            rows[slot] = n;
        }
        check_normed_input(OP, x, norm_weight, self.dtype, k)?;
        let n: usize = rows.iter().sum();
        expect(OP, "output", out, DType::F32, &[n])?;
        // Unused slots repeat the first matrix with no rows: read, never used.
        let weight = |slot: usize| weights.get(slot).copied().unwrap_or(first);
        let (read, written, flops) = cost(n, k, self.dtype);
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(X, x)
                .buffer(NORM_WEIGHT, norm_weight)
                .buffer(WEIGHT_A, weight(0))
                .buffer(WEIGHT_B, weight(1))
                .buffer(WEIGHT_C, weight(2))
                .buffer(OUT, out)
                .scalar(ROWS_A, rows[0] as u32)
                .scalar(ROWS_B, rows[1] as u32)
                .scalar(ROWS_C, rows[2] as u32)
                .scalar(K, k as u32)
                .scalar(EPS, eps)
                .dispatch(&self.kernel)?
                .grid(grid(n, MOST_BLOCKS, (4 * k) as u32))
                .cost(read + bytes_of(k, self.dtype), written, flops + 4 * k as u64)
                .op_kind(OpKind::fused(&[Primitive::RmsNorm, Primitive::MatVec])),
        )
    }
}
