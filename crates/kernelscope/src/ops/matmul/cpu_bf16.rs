//! The CPU mat-mul for bf16 weights and tokens on AVX-512 BF16: `vdpbf16ps`
//! multiplies 32 bf16 pairs into 16 f32 sums an instruction, four times the
//! products of AVX2's f32 multiply-add, and a bf16 times a bf16 is exact in
//! f32, so the result is the f32 product of the same bf16 inputs, summed in
//! another order.
//!
//! - The register tile is [`GROUP_ROWS`] weight rows × [`GROUP_TOKENS`]
//!   tokens: 24 accumulators of 16 lanes, each lane a partial sum over its
//!   pairs of depth, summed across lanes at the end of a pass. A step loads
//!   six weight vectors and four token vectors for 24 `vdpbf16ps`: the
//!   loads, not the products, bound a smaller tile (4 × 4 loads eight
//!   vectors for sixteen products).
//! - Weights and tokens are read where they lie (nothing is packed or
//!   copied); a pass ends with one masked step where its depth is not a
//!   whole number of 32-value steps, and a block's last 1-3 tokens take a
//!   narrower tile rather than padding.
//! - Depth is cut into passes of [`DEPTH_CHUNK`] values, so that a group's
//!   weights (24 KiB) stay in L1 while every token of a block passes over
//!   them; the first pass stores its sums, the later ones add to them.
//!   Tokens go in blocks of [`BLOCK_TOKENS`], whose pass (512 KiB) stays in
//!   L2 while every group of rows passes over it.
//! - A parallel task owns one group of rows and writes their columns of
//!   `out`.

use std::ops::Range;

use half::bf16;
use rayon::prelude::*;

use super::output::Output;

/// Weight rows per register tile.
pub(crate) const GROUP_ROWS: usize = 6;
/// Tokens per register tile.
const GROUP_TOKENS: usize = 4;
/// Values of depth per step: one 512-bit vector of bf16.
#[cfg(target_arch = "x86_64")]
const STEP: usize = 32;
/// Values of depth per pass over a block of tokens: six rows of 2048 bf16
/// are 24 KiB, half of this machine's 48 KiB L1 (measured: 2048 was the
/// fastest of 1024-8192 on the 8192-deep down projection).
pub(crate) const DEPTH_CHUNK: usize = 2048;
/// Tokens per block: 128 tokens of a 2048-value pass are 512 KiB, half of
/// a 1 MiB L2 (measured at 512 tokens: 64, 128 and unblocked, 128 fastest).
const BLOCK_TOKENS: usize = 128;

/// Where a group of weight rows comes from as bf16: read in place (bf16
/// weights), or dequantized into the task's scratch (quantized weights).
pub(crate) trait Bf16Rows: Sync {
    /// A task's scratch, made once per task.
    type Scratch: Default + Send;
    /// Whether the rows are read from memory where they lie (then the
    /// first tile of a block prefetches them).
    const IN_PLACE: bool;
    /// Rows `first_row..first_row + count` (`count` ≤ [`GROUP_ROWS`]),
    /// values `depth` of each, then the last of them again to fill the
    /// group.
    fn rows<'a>(
        &'a self,
        first_row: usize,
        count: usize,
        depth: Range<usize>,
        scratch: &'a mut Self::Scratch,
    ) -> [&'a [bf16]; GROUP_ROWS];
}

/// bf16 weights `[n, k]`, read where they lie.
struct InPlace<'a> {
    weight: &'a [bf16],
    k: usize,
}

impl Bf16Rows for InPlace<'_> {
    type Scratch = ();
    const IN_PLACE: bool = true;

    fn rows<'a>(
        &'a self,
        first_row: usize,
        count: usize,
        depth: Range<usize>,
        _: &'a mut (),
    ) -> [&'a [bf16]; GROUP_ROWS] {
        std::array::from_fn(|index| {
            let row = first_row + index.min(count - 1);
            &self.weight[row * self.k + depth.start..row * self.k + depth.end]
        })
    }
}

/// `out[m, n] = x[m, k] · weight[n, k]ᵀ` (slices of exactly those sizes, k
/// and m and n above zero). Only where the CPU has AVX-512 F, BW, VL and
/// BF16 (`DotPath::Avx512Bf16`).
pub(super) fn product(weight: &[bf16], x: &[bf16], out: &mut [f32], [m, n, k]: [usize; 3]) {
    product_of(&InPlace { weight, k }, x, out, [m, n, k]);
}

/// `out[m, n] = x[m, k] · Wᵀ`, W's `n` rows of `k` values coming from
/// `weights` a pass at a time (passes of [`DEPTH_CHUNK`] values, so a
/// quantized format's blocks must divide it). Only where the CPU has
/// AVX-512 F, BW, VL and BF16 (`DotPath::Avx512Bf16`).
pub(crate) fn product_of<R: Bf16Rows>(weights: &R, x: &[bf16], out: &mut [f32], [m, n, k]: [usize; 3]) {
    let output = Output::new(out, n);
    for first_token in (0..m).step_by(BLOCK_TOKENS) {
        let tokens = first_token..m.min(first_token + BLOCK_TOKENS);
        (0..n.div_ceil(GROUP_ROWS))
            .into_par_iter()
            .for_each_init(R::Scratch::default, |scratch, group| {
                let first_row = group * GROUP_ROWS;
                let rows = GROUP_ROWS.min(n - first_row);
                for depth_start in (0..k).step_by(DEPTH_CHUNK) {
                    let depth = depth_start..k.min(depth_start + DEPTH_CHUNK);
                    let row_slices = weights.rows(first_row, rows, depth.clone(), scratch);
                    let token_slice = |token: usize| &x[token * k + depth.start..token * k + depth.end];
                    let mut token = tokens.start;
                    while token < tokens.end {
                        let count = GROUP_TOKENS.min(tokens.end - token);
                        // The block's first tile brings in-place weights in from memory.
                        let first = R::IN_PLACE && token == tokens.start;
                        let mut sums = [[0.0f32; GROUP_ROWS]; GROUP_TOKENS];
                        // SAFETY: `product_of` is only called where the CPU
                        // has AVX-512 F, BW, VL and BF16
                        // (`cpu::uses_bf16_products`, `DotPath::supported`).
                        unsafe {
                            match count {
                                1 => x86::tile::<1>(&row_slices, [token_slice(token)], first, &mut sums),
                                2 => x86::tile::<2>(
                                    &row_slices,
                                    std::array::from_fn(|i| token_slice(token + i)),
                                    first,
                                    &mut sums,
                                ),
                                3 => x86::tile::<3>(
                                    &row_slices,
                                    std::array::from_fn(|i| token_slice(token + i)),
                                    first,
                                    &mut sums,
                                ),
                                _ => x86::tile::<4>(
                                    &row_slices,
                                    std::array::from_fn(|i| token_slice(token + i)),
                                    first,
                                    &mut sums,
                                ),
                            }
                        }
                        for (index, sums) in sums.iter().enumerate().take(count) {
                            if depth.start == 0 {
                                output.store(token + index, first_row, &sums[..rows]);
                            } else {
                                output.accumulate(token + index, first_row, &sums[..rows]);
                            }
                        }
                        token += count;
                    }
                }
            });
    }
}

/// `values` rounded to nearest bf16, ties to even (as `bf16::from_f32`),
/// NaN kept a NaN, in a loop the compiler turns into vector instructions.
pub(crate) fn round_to_bf16(values: &[f32], out: &mut [bf16]) {
    for (out, value) in out.iter_mut().zip(values) {
        let bits = value.to_bits();
        let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
        *out = bf16::from_bits(if value.is_nan() { 0x7fc0 } else { rounded as u16 });
    }
}

/// The x86 tile, compiled for AVX-512 BF16.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use half::bf16;

    use super::{GROUP_ROWS, GROUP_TOKENS, STEP};

    /// How far ahead of its loads the tile that first reads a pass's
    /// weights prefetches them: 256 values, 512 bytes a row (measured on
    /// weights larger than the caches: about 4 % faster; 256-1024 alike).
    const PREFETCH_AHEAD: usize = 256;

    /// `sums[token][row]` = the dot products of the rows with the first
    /// `TOKENS` tokens, all slices of one length; `prefetch` where the rows
    /// are still in memory rather than in the caches.
    ///
    /// AVX-512 VL is enabled though no 128- or 256-bit instruction is used:
    /// without it LLVM keeps `vdpbf16ps`'s accumulators in zmm0-15 and
    /// spills a tile of 24 to the stack.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
    pub(super) fn tile<const TOKENS: usize>(
        rows: &[&[bf16]; GROUP_ROWS],
        tokens: [&[bf16]; TOKENS],
        prefetch: bool,
        sums: &mut [[f32; GROUP_ROWS]; GROUP_TOKENS],
    ) {
        let depth = rows[0].len();
        debug_assert!(TOKENS <= GROUP_TOKENS);
        debug_assert!(
            rows.iter().all(|row| row.len() == depth) && tokens.iter().all(|token| token.len() == depth)
        );
        let mut accumulators = [[_mm512_setzero_ps(); GROUP_ROWS]; TOKENS];
        let whole_steps = depth / STEP;
        for step in 0..whole_steps {
            let at = step * STEP;
            if prefetch {
                for row in rows {
                    // A prefetch never faults, so it may point past the row.
                    _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(at + PREFETCH_AHEAD).cast());
                }
            }
            // SAFETY: `at + STEP <= depth`, the length of every slice.
            let weights: [__m512bh; GROUP_ROWS] =
                std::array::from_fn(|row| unsafe { load(rows[row], at, u32::MAX) });
            for (token, accumulators) in accumulators.iter_mut().enumerate() {
                // SAFETY: as above.
                let values = unsafe { load(tokens[token], at, u32::MAX) };
                for (sum, weights) in accumulators.iter_mut().zip(&weights) {
                    *sum = _mm512_dpbf16_ps(*sum, *weights, values);
                }
            }
        }
        let at = whole_steps * STEP;
        if at < depth {
            // The pass's last, partial step: masked loads, zeros past `depth`.
            let mask = (1u32 << (depth - at)) - 1;
            // SAFETY: the mask keeps every load inside its slice.
            let weights: [__m512bh; GROUP_ROWS] =
                std::array::from_fn(|row| unsafe { load(rows[row], at, mask) });
            for (token, accumulators) in accumulators.iter_mut().enumerate() {
                // SAFETY: as above.
                let values = unsafe { load(tokens[token], at, mask) };
                for (sum, weights) in accumulators.iter_mut().zip(&weights) {
                    *sum = _mm512_dpbf16_ps(*sum, *weights, values);
                }
            }
        }
        for (sums, accumulators) in sums.iter_mut().zip(&accumulators) {
            for (sum, accumulator) in sums.iter_mut().zip(accumulators) {
                *sum = _mm512_reduce_add_ps(*accumulator);
            }
        }
    }

    /// The 32 bf16 at `values[at..]` as pairs, lanes outside `mask` zero.
    ///
    /// # Safety
    /// Every lane in `mask` is inside `values`; the CPU has AVX-512 BW.
    #[inline(always)]
    unsafe fn load(values: &[bf16], at: usize, mask: u32) -> __m512bh {
        // SAFETY: the caller keeps the masked lanes inside the slice; masked
        // lanes are not read.
        let bits = unsafe { _mm512_maskz_loadu_epi16(mask, values.as_ptr().add(at).cast()) };
        // SAFETY: 32 bf16 as stored, reinterpreted as pairs.
        unsafe { std::mem::transmute::<__m512i, __m512bh>(bits) }
    }
}

/// Whether a mat-mul of `dtype` runs on `vdpbf16ps` (`cpu_bf16`): bf16
/// weights on the AVX-512 BF16 path, the one the mat-vecs take too (which
/// includes AVX-512 BW and VL, for its masked loads and its registers).
pub(crate) fn uses_bf16_products(dtype: crate::runtime::DType) -> bool {
    dtype == crate::runtime::DType::BF16 && crate::cpu_simd::dot::dot_path().takes_bf16_products()
}

#[cfg(test)]
mod tests {
    use half::bf16;

    use super::product;
    use crate::rng::SplitMix64;

    /// Against a plain f64 sum of the same bf16 values, on random data:
    /// shapes with partial row and token groups, depths below, at and past
    /// a step and not a multiple of it (the masked last step), and odd,
    /// depths of several passes and tokens of several blocks.
    /// Runs only where the CPU has the instructions, and says when it did not.
    #[test]
    fn bf16_products_match_a_plain_sum() {
        if !super::uses_bf16_products(crate::runtime::DType::BF16) {
            eprintln!("SKIPPED bf16_products_match_a_plain_sum: this CPU takes no vdpbf16ps path");
            return;
        }
        for [m, n, k] in [
            [1, 1, 1],
            [3, 5, 31],
            [4, 4, 32],
            [7, 9, 33],
            [64, 37, 2048],
            [17, 13, 601],
            // Depth past one pass (accumulated passes, a partial last one),
            // tokens past one block, a block ending in 1-3 tokens.
            [131, 7, 4100],
            [130, 11, 2048],
            [129, 6, 2049],
        ] {
            let mut rng = SplitMix64::new((m * 10_000 + n * 100 + k) as u64);
            let weight: Vec<bf16> = rng
                .vec_f32(n * k, -1.0, 1.0)
                .into_iter()
                .map(bf16::from_f32)
                .collect();
            let x: Vec<bf16> = rng
                .vec_f32(m * k, -2.0, 2.0)
                .into_iter()
                .map(bf16::from_f32)
                .collect();
            let mut out = vec![f32::NAN; m * n];
            product(&weight, &x, &mut out, [m, n, k]);
            for token in 0..m {
                for row in 0..n {
                    let terms = (0..k).map(|i| f64::from(x[token * k + i]) * f64::from(weight[row * k + i]));
                    let expected: f64 = terms.clone().sum();
                    let magnitude: f64 = terms.map(f64::abs).sum();
                    let actual = f64::from(out[token * n + row]);
                    assert!(
                        (actual - expected).abs() <= 1e-5 * magnitude + 1e-7,
                        "m {m} n {n} k {k}: [{token}, {row}] {actual} vs {expected}"
                    );
                }
            }
        }
    }
}
