//! The argument list of rms_norm's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! {
    X: "x" Read,
    WEIGHT: "weight" Read,
    OUT: "out" Write,
    EPS: "eps" F32,
    N: "n" U32,
    ROWS: "rows" U32,
}
