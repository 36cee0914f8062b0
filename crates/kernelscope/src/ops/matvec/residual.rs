//! Mat-vec with the residual add in its epilogue: `out[n] += W[n, k] · x[k]`,
//! the o_proj and down_proj of a decode step adding straight into the
//! residual stream, one dispatch where the unfused path has two (mat-vec,
//! then add). Declared as both op kinds it covers (`MatVec+ElemAdd`).

use super::cpu::matvec_add;
use super::{checked_dispatch, cost, with_core};
use crate::error::Result;
use crate::ops::{kernel_arguments, kernel_for, register_weight_kernels};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, OpKind, Primitive};

kernel_arguments! { WEIGHT: "weight" Read, X: "x" Read, OUT: "out" ReadWrite, N: "n" U32, K: "k" U32 }

// The CPU reference and the dispatch's checks are shared with the plain
// mat-vec, which places its arguments at the same positions.
const _: () =
    assert!(WEIGHT == super::WEIGHT && X == super::X && OUT == super::OUT && N == super::N && K == super::K);

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
        let (dispatch, [n, k]) =
            checked_dispatch("matvec_add", ARGUMENTS, &self.kernel, self.dtype, weight, x, out)?;
        let (read, written, flops) = cost(n, k, self.dtype);
        // The output is read as well as written: n more f32 read.
        encoder.dispatch(
            dispatch
                .cost(read + 4 * n as u64, written, flops + n as u64)
                .op_kind(OpKind::fused(&[Primitive::MatVec, Primitive::ElemAdd])),
        )
    }
}
