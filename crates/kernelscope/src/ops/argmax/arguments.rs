//! The argument list of argmax's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! { LOGITS: "logits" Read, PARTIALS: "partials" ReadWrite, OUT: "out" Write, N: "n" U32 }

/// Logits each block reduces, at most: a share small enough that a
/// vocabulary spreads over tens of blocks.
pub(super) const LOGITS_PER_BLOCK: usize = 2048;

/// The most blocks (the scratch holds a value and an index per block).
pub(super) const MOST_BLOCKS: usize = 1024;

/// Threads per block.
pub(super) const THREADS: u32 = 256;
