//! The CPU mat-mul for bf16 weights and tokens on AVX-512 BF16: `vdpbf16ps`
//! multiplies 32 bf16 pairs into 16 f32 sums an instruction, four times the
//! products of AVX2's f32 multiply-add, and a bf16 times a bf16 is exact in
//! f32, so the result is the f32 product of the same bf16 inputs, summed in
//! another order.
//!
//! - The tokens are copied once per call into rows padded with zeros to a
//!   whole number of 32-value steps, and to whole groups of
//!   [`GROUP_TOKENS`] rows; weight rows are read where they lie, with a
//!   masked load for a row's last partial step (no packing: packing a
//!   panel per chunk cost as much as the products at 64 tokens).
//! - The register tile is [`GROUP_ROWS`] weight rows × [`GROUP_TOKENS`]
//!   tokens: sixteen accumulators of 16 lanes, each lane a partial sum
//!   over its pairs of depth, summed across lanes once the row ends. A
//!   step loads four weight vectors and four token vectors for sixteen
//!   `vdpbf16ps`.
//! - A parallel task owns one group of rows (8 KiB to 64 KiB of weights,
//!   which stay in L1 or L2 while every token group passes over them) and
//!   writes their columns of `out`.

use half::bf16;
use rayon::prelude::*;

use super::cpu::Output;

/// Weight rows per register tile.
const GROUP_ROWS: usize = 4;
/// Tokens per register tile.
const GROUP_TOKENS: usize = 4;
/// Values of depth per step: one 512-bit vector of bf16.
const STEP: usize = 32;

/// `out[m, n] = x[m, k] · weight[n, k]ᵀ` (slices of exactly those sizes, k
/// and m and n above zero). Only where the CPU has AVX-512 F, BW and BF16
/// (`DotPath::Avx512Bf16`).
pub(super) fn product(weight: &[bf16], x: &[bf16], out: &mut [f32], [m, n, k]: [usize; 3]) {
    let padded = k.div_ceil(STEP) * STEP;
    let tokens = pad_tokens(x, m, k, padded);
    let output = Output::new(out, n);
    (0..n.div_ceil(GROUP_ROWS)).into_par_iter().for_each(|group| {
        let first_row = group * GROUP_ROWS;
        let rows = GROUP_ROWS.min(n - first_row);
        // A partial group repeats its last row; only real rows are stored.
        let row_slices: [&[bf16]; GROUP_ROWS] = std::array::from_fn(|index| {
            let row = first_row + index.min(rows - 1);
            &weight[row * k..(row + 1) * k]
        });
        for first_token in (0..m).step_by(GROUP_TOKENS) {
            let token_slices: [&[bf16]; GROUP_TOKENS] = std::array::from_fn(|index| {
                let token = first_token + index;
                &tokens[token * padded..(token + 1) * padded]
            });
            // SAFETY: `product` is only called where the CPU has AVX-512 F,
            // BW and BF16 (`cpu::uses_bf16_products`, `DotPath::supported`).
            let sums = unsafe { x86::tile(&row_slices, &token_slices, k) };
            for (index, sums) in sums.iter().enumerate().take(GROUP_TOKENS.min(m - first_token)) {
                output.store(first_token + index, first_row, &sums[..rows]);
            }
        }
    });
}

/// `x` `[m, k]` as `[m rounded up to GROUP_TOKENS, padded]`, zeros past
/// each row's `k` values and in the rows past `m`.
fn pad_tokens(x: &[bf16], m: usize, k: usize, padded: usize) -> Vec<bf16> {
    let mut tokens = vec![bf16::ZERO; m.div_ceil(GROUP_TOKENS) * GROUP_TOKENS * padded];
    for (row, values) in tokens.chunks_exact_mut(padded).zip(x.chunks_exact(k).take(m)) {
        row[..k].copy_from_slice(values);
    }
    tokens
}

/// The x86 tile, compiled for AVX-512 BF16.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use half::bf16;

    use super::{GROUP_ROWS, GROUP_TOKENS, STEP};

    /// `[token][row]` dot products of the rows (each `k` long) with the
    /// tokens (zero-padded to whole steps).
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(super) fn tile(
        rows: &[&[bf16]; GROUP_ROWS],
        tokens: &[&[bf16]; GROUP_TOKENS],
        k: usize,
    ) -> [[f32; GROUP_ROWS]; GROUP_TOKENS] {
        let mut sums = [[_mm512_setzero_ps(); GROUP_ROWS]; GROUP_TOKENS];
        let mut at = 0;
        while at < k {
            // The last step of a row ends in a masked load: past `k` is the
            // next row, or nothing.
            let left = k - at;
            let mask: __mmask32 = if left >= STEP {
                u32::MAX
            } else {
                (1u32 << left) - 1
            };
            let weights: [__m512bh; GROUP_ROWS] = std::array::from_fn(|row| {
                // SAFETY: the mask keeps the load inside the row's `k` values.
                let bits = unsafe { _mm512_maskz_loadu_epi16(mask, rows[row].as_ptr().add(at).cast()) };
                // SAFETY: 32 bf16 as stored, reinterpreted as pairs.
                unsafe { std::mem::transmute::<__m512i, __m512bh>(bits) }
            });
            for (token, sums) in sums.iter_mut().enumerate() {
                let values = &tokens[token][at..at + STEP];
                // SAFETY: `values` holds 32 bf16 (padded rows), 64 bytes;
                // reinterpreted as pairs as stored.
                let values = unsafe {
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(values.as_ptr().cast()))
                };
                for (sum, weights) in sums.iter_mut().zip(&weights) {
                    *sum = _mm512_dpbf16_ps(*sum, *weights, values);
                }
            }
            at += STEP;
        }
        sums.map(|sums| sums.map(|sum| _mm512_reduce_add_ps(sum)))
    }
}

#[cfg(test)]
mod tests {
    use half::bf16;

    use super::product;
    use crate::rng::SplitMix64;

    /// Against a plain f64 sum of the same bf16 values, on random data:
    /// shapes with partial row and token groups, depths below, at and past
    /// a step and not a multiple of it (the masked last step), and odd.
    /// Runs only where the CPU has the instructions, and says when it did not.
    #[test]
    fn bf16_products_match_a_plain_sum() {
        if !super::super::cpu::uses_bf16_products(crate::runtime::DType::BF16) {
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
