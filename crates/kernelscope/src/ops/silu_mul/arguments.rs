//! The argument list of silu_mul's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! { GATE: "gate" Read, UP: "up" Read, OUT: "out" Write, N: "n" U32 }
