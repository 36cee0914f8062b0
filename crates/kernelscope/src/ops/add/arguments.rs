//! The argument list of add's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! { X: "x" ReadWrite, Y: "y" Read, N: "n" U32, COLUMNS: "columns" U32 }
