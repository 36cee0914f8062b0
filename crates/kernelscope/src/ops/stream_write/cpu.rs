//! CPU reference of the write probe, and the CPU's write ceiling: word i
//! becomes `i * 2654435761 ^ seed`, split across threads (one thread cannot
//! saturate memory). The loop is compiled again for AVX-512 and AVX2
//! (chosen at run time; the build targets baseline x86-64), so the stores
//! are the widest the CPU has.

use rayon::prelude::*;

use crate::error::Result;
use crate::runtime::KernelArgs;

use super::{OUT, SEED, WORDS, pattern_word};

/// Words per task: large enough that a task streams for a while, small
/// enough that both threads stay busy to the end.
const TASK_WORDS: usize = 1 << 20;

/// `out[i] = pattern_word(i, seed)` over `words` u32 words.
pub(super) fn stream_write(args: &KernelArgs<'_>) -> Result<()> {
    let out = args.output::<u32>(OUT)?;
    let words = args.u64(WORDS)?;
    let seed = args.u32(SEED)?;
    if words != out.len() as u64 {
        return Err(crate::error::Error::KernelFailed {
            kernel: super::KERNEL_NAME.to_string(),
            message: format!("word count {words} does not match the output ({})", out.len()),
        });
    }
    out.par_chunks_mut(TASK_WORDS)
        .enumerate()
        .for_each(|(task, chunk)| fill(chunk, task * TASK_WORDS, seed));
    Ok(())
}

/// `chunk[j] = pattern_word(first + j, seed)`, with the widest stores the CPU has.
fn fill(chunk: &mut [u32], first: usize, seed: u32) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F, checked just above.
            return unsafe { fill_avx512(chunk, first, seed) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { fill_avx2(chunk, first, seed) };
        }
    }
    fill_plain(chunk, first, seed)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fill_avx512(chunk: &mut [u32], first: usize, seed: u32) {
    fill_plain(chunk, first, seed)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn fill_avx2(chunk: &mut [u32], first: usize, seed: u32) {
    fill_plain(chunk, first, seed)
}

#[inline(always)]
fn fill_plain(chunk: &mut [u32], first: usize, seed: u32) {
    for (offset, word) in chunk.iter_mut().enumerate() {
        *word = pattern_word(first + offset, seed);
    }
}
