//! The argument list of copy's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

/// The kernel's registered name.
pub const KERNEL_NAME: &str = "copy_bytes";

kernel_arguments! { SOURCE: "source" Read, DESTINATION: "destination" Write, WORDS: "words" U64 }
