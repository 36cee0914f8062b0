//! The argument list of head_norm's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! {
    X: "x" ReadWrite,
    WEIGHT: "weight" Read,
    EPS: "eps" F32,
    COUNT: "count" U32,
    HEAD_DIM: "head_dim" U32,
}

/// Warps of a CUDA block (a warp per head).
pub(super) const WARPS: usize = 8;

/// The most blocks launched (the kernel strides over further heads).
pub(super) const MOST_BLOCKS: usize = 4096;
