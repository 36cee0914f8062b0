//! The argument list of stream_read's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

/// The kernel's registered name.
pub const KERNEL_NAME: &str = "stream_read";

kernel_arguments! { INPUT: "input" Read, OUT: "out" ReadWrite, WORDS: "words" U64 }
