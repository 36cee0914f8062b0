//! The argument list of sample's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! {
    LOGITS: "logits" Read,
    OUT: "out" Write,
    TEMPERATURE: "temperature" F32,
    TOP_P: "top_p" F32,
    UNIFORM: "uniform" F32,
    N: "n" U32,
}
