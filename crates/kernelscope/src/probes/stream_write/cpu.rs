//! CPU reference of the write probe, and the CPU's write ceiling: word i
//! becomes `i * 2654435761 ^ seed`, split across threads (one thread cannot
//! saturate memory). With AVX-512 the aligned middle of each task is
//! written with 64-byte non-temporal stores, which skip the read for
//! ownership a plain store pays (the line is written whole, never read);
//! otherwise the loop is compiled again for AVX2 (chosen at run time; the
//! build targets baseline x86-64), so the stores are the widest the CPU has.

use rayon::prelude::*;

use crate::error::Result;
use crate::runtime::KernelArgs;

use super::arguments::pattern_word;
use super::{OUT, SEED, WORDS};

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
            unsafe { fill_avx512(chunk, first, seed) };
            return;
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
fn fill_avx512(chunk: &mut [u32], first: usize, seed: u32) {
    use std::arch::x86_64::*;
    // The words before the first 64-byte boundary and after the last one
    // are written plainly; the lines between, 16 words at a time.
    let head = chunk.as_ptr().align_offset(64).min(chunk.len());
    let lines = (chunk.len() - head) / 16;
    let (before, rest) = chunk.split_at_mut(head);
    let (middle, after) = rest.split_at_mut(lines * 16);
    fill_plain(before, first, seed);
    let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let multiplier = _mm512_set1_epi32(2_654_435_761_u32 as i32);
    let seeds = _mm512_set1_epi32(seed as i32);
    for (line, words) in middle.chunks_exact_mut(16).enumerate() {
        // The index is cut to 32 bits, as pattern_word cuts it.
        let base = _mm512_set1_epi32((first + head + 16 * line) as u32 as i32);
        let indices = _mm512_add_epi32(base, lanes);
        let pattern = _mm512_xor_si512(_mm512_mullo_epi32(indices, multiplier), seeds);
        // SAFETY: `words` is 16 u32 (64 bytes) of `middle`, which starts on
        // a 64-byte boundary, so the store is aligned and in bounds.
        unsafe { _mm512_stream_si512(words.as_mut_ptr().cast(), pattern) };
    }
    // Non-temporal stores are weakly ordered: fence them before the task
    // (and so the dispatch) is seen to have finished.
    _mm_sfence();
    fill_plain(after, first + head + 16 * lines, seed);
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
