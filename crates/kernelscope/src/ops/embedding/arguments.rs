//! The argument list of embedding's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! {
    TABLE: "table" Read,
    TOKENS: "tokens" Read,
    OUT: "out" Write,
    FIRST: "first" U32,
    ROWS: "rows" U32,
    VOCAB: "vocab" U32,
    HIDDEN: "hidden" U32,
    TABLE_FIRST: "table_first" U32,
    TABLE_ROWS: "table_rows" U32,
}

/// Threads per block: one block per row, each thread striding over it.
pub(super) const THREADS: u32 = 256;
