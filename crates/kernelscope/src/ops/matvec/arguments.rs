//! The argument list of matvec's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! { WEIGHT: "weight" Read, X: "x" Read, OUT: "out" Write, N: "n" U32, K: "k" U32 }

/// Threads per block of every mat-vec kernel (`MATVEC_THREADS` in
/// `rows.cuh`): eight warps, each computing whole rows.
pub(crate) const THREADS: u32 = 256;

/// Warps of a block.
pub(super) const WARPS: usize = THREADS as usize / 32;

/// The most blocks a plain mat-vec launches: enough for every row of the
/// largest projection to have its own warp on today's GPUs (one resident
/// wave of 8-warp blocks on 132 SMs is about 1,000), beyond which warps loop.
pub(super) const MOST_BLOCKS: usize = 4096;
