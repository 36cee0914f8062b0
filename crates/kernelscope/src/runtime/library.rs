//! Work a backend hands to a vendor library instead of a kernel of ours:
//! GEMM on tensor cores is best done by cuBLASLt, whose kernels we do not
//! write or name. A registered kernel may name a [`LibraryCall`] for a
//! backend in place of source; its dispatch then carries the same arguments
//! a kernel of ours would, declared once here (the backend reads them, the
//! op builds its dispatch by them), and the backend profiles every kernel
//! the library launches under that dispatch's op, scope and label.

use super::DType;
use super::arguments::kernel_arguments;

/// A library computation and the argument order its dispatch follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LibraryCall {
    /// `out[m, n] = x[m, k] · weight[n, k]ᵀ`: weight and x of `dtype`, out
    /// f32, accumulation in f32 (bf16/f16 on tensor cores; f32 as plain
    /// single precision, no TF32, so it matches the CPU reference to f32
    /// rounding). Its arguments are those of `library::gemm` (buffers
    /// `weight`, `x`, `out`, then `m`, `n`, `k` as u32).
    Gemm {
        /// The element type of the weight and of x.
        dtype: DType,
    },
}

/// A GEMM dispatch's arguments, the one list the CUDA backend reads and
/// the matmul op (whose CPU reference and `.cu` take the same) follows.
pub(crate) mod gemm {
    super::kernel_arguments! {
        WEIGHT: "weight" Read,
        X: "x" Read,
        OUT: "out" Write,
        M: "m" U32,
        N: "n" U32,
        K: "k" U32,
    }
}
