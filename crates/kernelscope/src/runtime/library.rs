//! Work a backend hands to a vendor library instead of a kernel of ours:
//! GEMM on tensor cores is best done by cuBLASLt, whose kernels we do not
//! write or name. A registered kernel may name a [`LibraryCall`] for a
//! backend in place of source; its dispatch then carries the same arguments
//! a kernel of ours would (the op declares them once), and the backend
//! profiles every kernel the library launches under that dispatch's op,
//! scope and label.

use super::DType;

/// A library computation and the argument order its dispatch follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LibraryCall {
    /// `out[m, n] = x[m, k] · weight[n, k]ᵀ`: weight and x of `dtype`, out
    /// f32, accumulation in f32 (bf16/f16 on tensor cores; f32 as plain
    /// single precision, no TF32, so it matches the CPU reference to f32
    /// rounding). Arguments in order: buffers `weight`, `x`, `out`, then
    /// `m`, `n`, `k` as u32.
    Gemm {
        /// The element type of the weight and of x.
        dtype: DType,
    },
}

impl LibraryCall {
    /// Positions of a GEMM dispatch's arguments.
    pub const GEMM_WEIGHT: usize = 0;
    /// See [`LibraryCall::Gemm`].
    pub const GEMM_X: usize = 1;
    /// See [`LibraryCall::Gemm`].
    pub const GEMM_OUT: usize = 2;
    /// See [`LibraryCall::Gemm`].
    pub const GEMM_M: usize = 3;
    /// See [`LibraryCall::Gemm`].
    pub const GEMM_N: usize = 4;
    /// See [`LibraryCall::Gemm`].
    pub const GEMM_K: usize = 5;
}
