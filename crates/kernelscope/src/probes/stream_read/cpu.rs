//! CPU reference of the read probe, and the CPU's read ceiling: the words
//! folded with XOR into `out[0]`, split across threads (one thread cannot
//! saturate memory). The fold is compiled again for AVX-512 and AVX2
//! (chosen at run time; the build targets baseline x86-64), so the loads
//! are the widest the CPU has.

use rayon::prelude::*;

use crate::error::Result;
use crate::runtime::KernelArgs;

use super::{INPUT, OUT, WORDS};

/// `out[0] ^= input[0] ^ input[1] ^ …`, over `words` u32 words.
pub(super) fn stream_read(args: &KernelArgs<'_>) -> Result<()> {
    let input = args.input::<u32>(INPUT)?;
    let out = args.output::<u32>(OUT)?;
    let words = args.u64(WORDS)?;
    if words != input.len() as u64 || out.is_empty() {
        return Err(crate::error::Error::KernelFailed {
            kernel: super::KERNEL_NAME.to_string(),
            message: format!(
                "word count {words} does not match the input ({}), or no output word",
                input.len()
            ),
        });
    }
    out[0] ^= fold_parallel(input);
    Ok(())
}

/// The XOR of every word, across the threads: one contiguous share each,
/// as a plain read loop splits it. Tasks of 4 MiB taken in turns read 29 to
/// 31 GB/s on the 2-core development machine where halves read 32 to 34.5,
/// six paired rounds (then a test; now `benches/read_ceiling.rs`): each thread's hardware
/// prefetcher follows one long stream better than a new one every 4 MiB.
fn fold_parallel(words: &[u32]) -> u32 {
    let share = words.len().div_ceil(rayon::current_num_threads().max(1)).max(1);
    words.par_chunks(share).map(fold).reduce(|| 0, |a, b| a ^ b)
}

/// The XOR of every word, on this thread, with the widest loads the CPU has.
fn fold(words: &[u32]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F, checked just above.
            return unsafe { fold_avx512(words) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { fold_avx2(words) };
        }
    }
    fold_lanes(words)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fold_avx512(words: &[u32]) -> u32 {
    fold_lanes(words)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn fold_avx2(words: &[u32]) -> u32 {
    fold_lanes(words)
}

/// The plain fold: the compiler vectorises an XOR reduction over a slice
/// to the widest registers the function is compiled for (a hand-laned
/// loop of sixteen lanes measured 8 GB/s here, this one 76 GB/s).
#[inline(always)]
fn fold_lanes(words: &[u32]) -> u32 {
    words.iter().fold(0, |a, &b| a ^ b)
}
