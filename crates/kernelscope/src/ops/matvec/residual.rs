//! Mat-vec with the residual add in its epilogue: `out[n] += W[n, k] · x[k]`,
//! the o_proj and down_proj of a decode step adding straight into the
//! residual stream, one dispatch where the unfused path has two (mat-vec,
//! then add). Declared as both op kinds it covers ([`OpKind::MatVecElemAdd`]).

use super::cpu::matvec_add;
use super::{MOST_BLOCKS, cost, grid, with_core};
use crate::error::Result;
use crate::ops::{Arguments, dimensions, expect, kernel_arguments, kernel_for, register_weight_kernels};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, OpKind};

kernel_arguments! { WEIGHT: "weight" Read, X: "x" Read, OUT: "out" ReadWrite, N: "n" U32, K: "k" U32 }

// The CPU reference is shared with the plain mat-vec, which reads the same
// positions.
const _: () = assert!(WEIGHT == super::WEIGHT && X == super::X && OUT == super::OUT && K == super::K);

/// Registers `matvec_add_<dtype>`.
pub fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(
        registry,
        "matvec_add",
        matvec_add,
        &with_core(include_str!("residual.cu"))
    );
}

/// The mat-vec-and-add op for one weight dtype.
#[derive(Clone, Debug)]
pub struct MatVecAdd {
    kernel: Kernel,
    dtype: DType,
}

impl MatVecAdd {
    /// The op for weights of `dtype` on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, dtype: DType) -> Result<Self> {
        Ok(MatVecAdd {
            kernel: kernel_for(registry, device, "matvec_add", dtype)?,
            dtype,
        })
    }

    /// `out[n] += weight[n, k] · x[k]`.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        weight: &Buffer,
        x: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        let [n, k] = dimensions("matvec_add", "weight", weight)?;
        expect("matvec_add", "weight", weight, self.dtype, &[n, k])?;
        expect("matvec_add", "input", x, DType::F32, &[k])?;
        expect("matvec_add", "output", out, DType::F32, &[n])?;
        let (bytes, flops) = cost(n, k, self.dtype);
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(WEIGHT, weight)
                .buffer(X, x)
                .buffer(OUT, out)
                .scalar(N, n as u32)
                .scalar(K, k as u32)
                .dispatch(&self.kernel)?
                .grid(grid(n, MOST_BLOCKS, 0))
                // The output is read as well as written: n more f32.
                .cost(bytes + 4 * n as u64, flops + n as u64)
                .op_kind(OpKind::MatVecElemAdd),
        )
    }
}
