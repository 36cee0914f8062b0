//! The x86-64 kernels of the CPU's dot products (`dot`): bf16 rows in
//! exact f32 products on AVX2 + FMA or AVX-512 F, x in bf16 parts on
//! AVX-512 BF16, and the generic eight-lane loop compiled for AVX2 + FMA.
//! Each is called only on a path whose instructions the CPU has.

use std::arch::x86_64::*;

use half::bf16;

use super::element::WeightElement;

#[target_feature(enable = "avx2,fma")]
pub(crate) fn dot_avx2_fma<W: WeightElement>(row: &[W], x: &[f32]) -> f32 {
    crate::cpu_simd::element::dot_lanes::<W, true>(row, x)
}

/// `row · x` for a bf16 row on AVX2 + FMA. Each 32-bit word of the row
/// holds an even element (low half) and the next odd one (high half):
/// a shift widens the even ones and a mask the odd ones, each multiplied
/// (exactly, in the FMA) with x's even or odd elements (`even`, `odd`:
/// x de-interleaved once per mat-vec), into eight independent sums so
/// the FMA's latency never waits. Three instructions per 16 weights
/// fewer than widening them in order (`vpmovzxwd` then a shift each 8).
#[target_feature(enable = "avx2,fma")]
pub(crate) fn dot_bf16_avx2(row: &[bf16], x: &[f32], even: &[f32], odd: &[f32]) -> f32 {
    const CHUNK: usize = 16;
    const CHUNKS: usize = 4;
    let length = row.len().min(x.len());
    let mut sums = [_mm256_setzero_ps(); 2 * CHUNKS];
    let high_half = _mm256_set1_epi32(0xffff_0000_u32 as i32);
    let mut start = 0;
    while start + CHUNK * CHUNKS <= length {
        super::prefetch::prefetch_ahead(row.as_ptr().wrapping_add(start).cast(), 128);
        for chunk in 0..CHUNKS {
            let at = start + CHUNK * chunk;
            let weights = &row[at..at + CHUNK];
            let (even_values, odd_values) = (&even[at / 2..at / 2 + 8], &odd[at / 2..at / 2 + 8]);
            // SAFETY: `weights` holds 16 bf16 (32 bytes), each of x's halves 8 f32 (32 bytes).
            let (words, even_values, odd_values) = unsafe {
                (
                    _mm256_loadu_si256(weights.as_ptr().cast()),
                    _mm256_loadu_ps(even_values.as_ptr()),
                    _mm256_loadu_ps(odd_values.as_ptr()),
                )
            };
            let even_weights = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(words));
            let odd_weights = _mm256_castsi256_ps(_mm256_and_si256(words, high_half));
            sums[2 * chunk] = _mm256_fmadd_ps(even_weights, even_values, sums[2 * chunk]);
            sums[2 * chunk + 1] = _mm256_fmadd_ps(odd_weights, odd_values, sums[2 * chunk + 1]);
        }
        start += CHUNK * CHUNKS;
    }
    let mut total = _mm256_setzero_ps();
    for sum in sums {
        total = _mm256_add_ps(total, sum);
    }
    let halves = _mm_add_ps(_mm256_castps256_ps128(total), _mm256_extractf128_ps::<1>(total));
    let pairs = _mm_add_ps(halves, _mm_movehl_ps(halves, halves));
    let mut total = _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps::<1>(pairs, pairs)));
    for (weight, value) in row[start..length].iter().zip(&x[start..length]) {
        total = weight.to_f32().mul_add(*value, total);
    }
    total
}

/// `row · x` for a bf16 row and f32 x: each weight widened to f32 (its
/// bits shifted up) and multiplied into f32 sums, four chains of 16.
#[target_feature(enable = "avx512f")]
pub(crate) fn dot_bf16_f32(row: &[bf16], x: &[f32]) -> f32 {
    let length = row.len().min(x.len());
    let mut sums = [_mm512_setzero_ps(); 4];
    let mut start = 0;
    while start + 64 <= length {
        prefetch_ahead(row, start);
        for (chain, sum) in sums.iter_mut().enumerate() {
            let at = start + 16 * chain;
            let weights = &row[at..at + 16];
            let values = &x[at..at + 16];
            // SAFETY: `weights` holds 16 bf16 (32 bytes) and `values` 16 f32 (64 bytes).
            let (bits, values) = unsafe {
                (
                    _mm256_loadu_si256(weights.as_ptr().cast()),
                    _mm512_loadu_ps(values.as_ptr()),
                )
            };
            let widened = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(bits)));
            *sum = _mm512_fmadd_ps(widened, values, *sum);
        }
        start += 64;
    }
    let total = _mm512_add_ps(_mm512_add_ps(sums[0], sums[1]), _mm512_add_ps(sums[2], sums[3]));
    let mut total = _mm512_reduce_add_ps(total);
    for (weight, value) in row[start..length].iter().zip(&x[start..length]) {
        total = weight.to_f32().mul_add(*value, total);
    }
    total
}

/// `row · (parts[0] + parts[1] + ...)` for a bf16 row and parts of its
/// length: 32 pairs an instruction, each part into its own f32
/// accumulators (two chains each), then the rest one element at a time.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(crate) fn dot_bf16_parts<const PARTS: usize>(row: &[bf16], parts: [&Vec<bf16>; PARTS]) -> f32 {
    const LANES: usize = 32;
    let length = parts
        .iter()
        .fold(row.len(), |length, part| length.min(part.len()));
    let mut sums = [[_mm512_setzero_ps(); PARTS]; 2];
    let mut start = 0;
    while start + 2 * LANES <= length {
        prefetch_ahead(row, start);
        for (chain, at) in [start, start + LANES].into_iter().enumerate() {
            let weights = load(row, at);
            for (part, values) in parts.iter().enumerate() {
                let sum = &mut sums[chain][part];
                *sum = _mm512_dpbf16_ps(*sum, weights, load(values, at));
            }
        }
        start += 2 * LANES;
    }
    if start + LANES <= length {
        let weights = load(row, start);
        for (part, values) in parts.iter().enumerate() {
            sums[0][part] = _mm512_dpbf16_ps(sums[0][part], weights, load(values, start));
        }
        start += LANES;
    }
    let total = sums
        .iter()
        .flatten()
        .fold(_mm512_setzero_ps(), |total, sum| _mm512_add_ps(total, *sum));
    let mut total = _mm512_reduce_add_ps(total);
    for (at, weight) in row.iter().enumerate().take(length).skip(start) {
        let value: f32 = parts.iter().map(|part| part[at].to_f32()).sum();
        total += weight.to_f32() * value;
    }
    total
}

/// `rows[r] · (parts[0] + parts[1] + ...)` for `ROWS` bf16 rows at once:
/// each 32 elements of every part are loaded once for all the rows, one
/// f32 accumulator a row and part, then the rest one element at a time.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(crate) fn dot_bf16_parts_rows<const PARTS: usize, const ROWS: usize>(
    rows: [&[bf16]; ROWS],
    parts: [&Vec<bf16>; PARTS],
) -> [f32; ROWS] {
    const LANES: usize = 32;
    let length = parts.iter().fold(
        rows.iter().fold(usize::MAX, |length, row| length.min(row.len())),
        |length, part| length.min(part.len()),
    );
    let mut sums = [[_mm512_setzero_ps(); PARTS]; ROWS];
    let mut start = 0;
    while start + LANES <= length {
        let values: [__m512bh; PARTS] = std::array::from_fn(|part| load(parts[part], start));
        for (row, sums) in rows.iter().zip(sums.iter_mut()) {
            super::prefetch::prefetch_ahead(row.as_ptr().wrapping_add(start).cast(), 64);
            let weights = load(row, start);
            for (sum, values) in sums.iter_mut().zip(values) {
                *sum = _mm512_dpbf16_ps(*sum, weights, values);
            }
        }
        start += LANES;
    }
    std::array::from_fn(|row| {
        let total = sums[row]
            .iter()
            .fold(_mm512_setzero_ps(), |total, sum| _mm512_add_ps(total, *sum));
        let mut total = _mm512_reduce_add_ps(total);
        for at in start..length {
            let value: f32 = parts.iter().map(|part| part[at].to_f32()).sum();
            total += rows[row][at].to_f32() * value;
        }
        total
    })
}

/// Asks for the 128 bytes of weights [`super::prefetch::PREFETCH_AHEAD`] bytes
/// past element `at` of `row`, which may lie past the row's end.
#[inline]
#[target_feature(enable = "avx512f")]
fn prefetch_ahead(row: &[bf16], at: usize) {
    super::prefetch::prefetch_ahead(row.as_ptr().wrapping_add(at).cast(), 128);
}

/// The 32 bf16 of `values` from `at` (which must leave 32 in bounds).
#[inline]
#[target_feature(enable = "avx512f,avx512bf16")]
fn load(values: &[bf16], at: usize) -> __m512bh {
    let chunk = &values[at..at + 32];
    // SAFETY: `chunk` holds 32 bf16, the 64 bytes an unaligned load reads.
    let bits = unsafe { _mm512_loadu_si512(chunk.as_ptr().cast()) };
    // SAFETY: both are 64-byte vectors of plain bits; the bf16 pairs
    // are the words as stored.
    unsafe { std::mem::transmute::<__m512i, __m512bh>(bits) }
}
