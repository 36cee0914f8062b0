//! The argument list of stream_write's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

/// The kernel's registered name.
pub const KERNEL_NAME: &str = "stream_write";

kernel_arguments! { OUT: "out" Write, WORDS: "words" U64, SEED: "seed" U32 }

/// Word `index` of the pattern the probe writes.
pub fn pattern_word(index: usize, seed: u32) -> u32 {
    (index as u32).wrapping_mul(2_654_435_761) ^ seed
}
