//! Software prefetch of the weights a CPU mat-vec is about to read, shared
//! by the bf16 dot kernels and the quantized integer rows.

/// How far ahead of the weights being dotted the CPU mat-vecs (bf16 here,
/// the quantized ones' integer rows too) ask for the next, in bytes: past a
/// short row, into the next, which lies after it. The hardware prefetcher
/// alone left a 2-thread mat-vec of three-part dots at 70-75 % of a plain
/// read loop's rate on the 2-core EPYC; asking 2 KiB ahead raised it to
/// about 89 % (1 to 16 KiB ahead were tried; docs/perf-history.md,
/// 2026-11-26, the loop's table in `git show fb4b29a:docs/PERF.md`) and
/// BF16 decode by 10 % (docs/PERF.md).
#[cfg(target_arch = "x86_64")]
const PREFETCH_AHEAD: usize = 2048;

/// Asks for the `bytes` (whole 64-byte lines) [`PREFETCH_AHEAD`] past `at`,
/// which may lie past its row and its allocation: the address is computed
/// with `wrapping_add`, and only a prefetch touches it.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "sse")]
pub(crate) fn prefetch_ahead(at: *const u8, bytes: usize) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    let ahead = at.wrapping_add(PREFETCH_AHEAD);
    for line in (0..bytes).step_by(64) {
        // A prefetch never faults and changes no memory, whatever the address.
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line) as *const i8);
    }
}
