//! The argument list of experts' kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::quantized::linear::CUDA_THREADS;

/// Warps of a CUDA block (each computes one row at a time).
pub(super) const WARPS: usize = CUDA_THREADS as usize / 32;

/// Blocks along an expert's (or the hidden) rows at most; warps walk the rest.
pub(super) const MOST_BLOCKS: usize = 4096;
