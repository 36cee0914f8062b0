//! The argument list of route's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! {
    LOGITS: "logits" Read,
    IDS: "ids" Write,
    WEIGHTS: "weights" Write,
    COUNTS: "counts" ReadWrite,
    ROWS: "rows" U32,
    EXPERTS: "experts" U32,
    K: "k" U32,
    RENORMALIZE: "renormalize" U32,
}

/// The most experts a row may choose (the CUDA kernel's shared lists).
pub const MOST_CHOSEN: usize = 32;
