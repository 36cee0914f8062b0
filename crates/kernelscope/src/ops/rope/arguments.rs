//! The argument list of rope's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! {
    X: "x" ReadWrite,
    INVERSE_FREQUENCIES: "inverse_frequencies" Read,
    POSITIONS: "positions" Read,
    FIRST: "first" U32,
    ROWS: "rows" U32,
    HEADS: "heads" U32,
    HEAD_DIM: "head_dim" U32,
    ATTENTION_SCALING: "attention_scaling" F32,
}
