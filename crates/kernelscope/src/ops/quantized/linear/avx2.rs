//! The 8-bit integer products of the quantized mat-vecs with AVX2, FMA
//! and F16C, as llama.cpp's `ggml_vec_dot_*_q8_*` write them (`maddubs`
//! and `madd` over whole blocks): Q8_0, Q4_K (also several input rows per
//! weight row, for a prefill chunk) and Q6_K; other formats take the
//! portable products of `quant::int8` (`cpu::rows_int8` picks). x86-64 only; `available` says
//! whether this CPU runs them, checked once.

use crate::cpu_simd::prefetch::prefetch_ahead;
use crate::quant::Int8Activations;

/// The sum of the eight lanes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn sum_lanes(sums: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let four = _mm_add_ps(_mm256_extractf128_ps(sums, 1), _mm256_castps256_ps128(sums));
    let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
    _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)))
}

/// One Q4_K row against Q8_K activations with AVX2, as llama.cpp's
/// `ggml_vec_dot_q4_K_q8_K`: each pair of 32-element sub-blocks is one
/// 32-byte load split into low and high nibbles (unsigned, so `maddubs`
/// takes them as they are), the sub-block scales applied by `madd`. The
/// per-block work is vector work too: the eight scales widened once and
/// broadcast per pair by byte shuffles, the minimums multiplied with the
/// activations' pair sums eight at a time, d and dmin widened by F16C
/// together. Done in scalars (eight scale broadcasts from general
/// registers, a loop over the minimums, two software f16 conversions) that
/// work took two thirds of a block's instructions and held the kernel at
/// 17 GB/s on the 2-core EPYC.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4_k_row(blocks: &[u8], x: &Int8Activations) -> f32 {
    // SAFETY: AVX2, FMA and F16C are present (this function's requirement).
    unsafe { q4_k_rows::<1>(blocks, [x])[0] }
}

/// [`q4_k_row`] for `R` input rows at once (a prefill chunk's): each
/// block's scales, minimums and nibbles unpacked once and multiplied with
/// every row's activations.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4_k_rows<const R: usize>(blocks: &[u8], xs: [&Int8Activations; R]) -> [f32; R] {
    use crate::quant::formats::q4_k;
    use crate::quant::k_scales::scales_mins_k4;
    use std::arch::x86_64::*;
    let count = blocks.len() / q4_k::BYTES;
    for x in xs {
        assert!(x.quants.len() >= count * 256 && x.sums.len() >= count * 16 && x.scales.len() >= count);
    }
    let low_nibbles = _mm256_set1_epi8(0x0F);
    // Byte shuffles broadcasting 16-bit element e of each 128-bit lane.
    let broadcast = |e: i16| _mm256_set1_epi16(((2 * e + 1) << 8) | (2 * e));
    let pick = [
        broadcast(0),
        broadcast(1),
        broadcast(2),
        broadcast(3),
        broadcast(4),
        broadcast(5),
        broadcast(6),
        broadcast(7),
    ];
    let mut sums = [_mm256_setzero_ps(); R];
    let mut minimum_sums = [_mm256_setzero_ps(); R];
    for index in 0..count {
        // SAFETY: block `index` is whole within `blocks`, and each row's
        // activations hold 256 quants, 16 sums and a scale per block
        // (asserted above); every load below is unaligned and in bounds.
        unsafe {
            let block = blocks.as_ptr().add(index * q4_k::BYTES);
            prefetch_ahead(block, q4_k::BYTES);
            let packed: &[u8; 12] = &*(block.add(q4_k::SCALES) as *const [u8; 12]);
            let (scales, mins) = scales_mins_k4(packed);
            // d and dmin (adjacent f16s) widened together.
            let d_dmin = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes([
                *block.add(q4_k::D),
                *block.add(q4_k::D + 1),
                *block.add(q4_k::DMIN),
                *block.add(q4_k::DMIN + 1),
            ])));
            let d = _mm_cvtss_f32(d_dmin);
            let dmin = _mm_cvtss_f32(_mm_shuffle_ps(d_dmin, d_dmin, 1));
            let mins = _mm256_cvtepu8_epi32(_mm_set1_epi64x(i64::from_le_bytes(mins)));
            // The eight scales as 16-bit lanes, in both 128-bit halves.
            let scales16 = _mm256_cvtepu8_epi16(_mm_set1_epi64x(i64::from_le_bytes(scales)));
            let mut integer = [_mm256_setzero_si256(); R];
            for pair in 0..4 {
                let nibbles = _mm256_loadu_si256(block.add(q4_k::QS + 32 * pair) as *const __m256i);
                let low = _mm256_and_si256(nibbles, low_nibbles);
                let high = _mm256_and_si256(_mm256_srli_epi16(nibbles, 4), low_nibbles);
                let (scale_low, scale_high) = (
                    _mm256_shuffle_epi8(scales16, pick[2 * pair]),
                    _mm256_shuffle_epi8(scales16, pick[2 * pair + 1]),
                );
                for (x, integer) in xs.iter().zip(&mut integer) {
                    let activations = x.quants.as_ptr().add(index * 256 + 64 * pair);
                    let values_low = _mm256_loadu_si256(activations as *const __m256i);
                    let values_high = _mm256_loadu_si256(activations.add(32) as *const __m256i);
                    let products_low = _mm256_madd_epi16(_mm256_maddubs_epi16(low, values_low), scale_low);
                    let products_high =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(high, values_high), scale_high);
                    *integer = _mm256_add_epi32(*integer, _mm256_add_epi32(products_low, products_high));
                }
            }
            for r in 0..R {
                let x = xs[r];
                let scale = *x.scales.get_unchecked(index);
                // Minimums: mins[s] × (the sum of sub-block s's 32 quants).
                let group_sums = x.sums.as_ptr().add(index * 16);
                let pairs = sub_block_sums(group_sums);
                minimum_sums[r] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(_mm256_mullo_epi32(mins, pairs)),
                    _mm256_set1_ps(dmin * scale),
                    minimum_sums[r],
                );
                sums[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(integer[r]), _mm256_set1_ps(d * scale), sums[r]);
            }
        }
    }
    // SAFETY: AVX2 is present (this function's own requirement).
    std::array::from_fn(|r| unsafe { sum_lanes(_mm256_sub_ps(sums[r], minimum_sums[r])) })
}

/// The sums of a Q8_K block's activations over each of Q4_K's eight
/// 32-element sub-blocks (its sixteen 16-element sums added in pairs), in
/// order, as eight 32-bit lanes.
///
/// # Safety
/// `group_sums` points at sixteen readable `i32`s.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn sub_block_sums(group_sums: *const i32) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: sixteen readable i32s at `group_sums` (the caller's promise), unaligned loads.
    let (first, second) = unsafe {
        (
            _mm256_loadu_si256(group_sums as *const __m256i),
            _mm256_loadu_si256(group_sums.add(8) as *const __m256i),
        )
    };
    _mm256_permute4x64_epi64(_mm256_hadd_epi32(first, second), 0b11_01_10_00)
}

/// One Q6_K row against Q8_K activations with AVX2, as llama.cpp's
/// `ggml_vec_dot_q6_K_q8_K`: the 6-bit values rebuilt from their low
/// nibbles and high bit pairs (unsigned 0..63, so `maddubs` takes them),
/// each 16-element group's signed scale applied by `madd` (broadcast by a
/// byte shuffle from the block's sixteen scales widened once), and the
/// offset of 32 taken off once per block as 32 × the scales times the
/// activations' 16-element sums.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q6_k_row(blocks: &[u8], x: &Int8Activations) -> f32 {
    use crate::quant::formats::q6_k;
    use std::arch::x86_64::*;
    let count = blocks.len() / q6_k::BYTES;
    assert!(x.quants.len() >= count * 256 && x.sums.len() >= count * 16 && x.scales.len() >= count);
    let low_nibbles = _mm256_set1_epi8(0x0F);
    let two_bits = _mm256_set1_epi8(0x03);
    // Quarter q of a half-block covers groups 2q (low 128-bit lane) and
    // 2q + 1 (high lane) of that half's eight scales.
    let pick = |e: i16| _mm_set1_epi16(((2 * e + 1) << 8) | (2 * e));
    let controls = [0i16, 1, 2, 3].map(|q| _mm256_set_m128i(pick(2 * q + 1), pick(2 * q)));
    let mut sums = _mm256_setzero_ps();
    for index in 0..count {
        // SAFETY: block `index` is whole within `blocks`, and the
        // activations hold 256 quants, 16 sums and a scale per block
        // (asserted above); every load below is unaligned and in bounds.
        unsafe {
            let block = blocks.as_ptr().add(index * q6_k::BYTES);
            prefetch_ahead(block, q6_k::BYTES);
            let activations = x.quants.as_ptr().add(index * 256);
            let group_sums = x.sums.as_ptr().add(index * 16);
            let scale_bytes = _mm_loadu_si128(block.add(q6_k::SCALES) as *const __m128i);
            let scales16 = _mm256_cvtepi8_epi16(scale_bytes);
            let halves = [
                _mm256_permute2x128_si256(scales16, scales16, 0x00),
                _mm256_permute2x128_si256(scales16, scales16, 0x11),
            ];
            // The offset: Σ scale[g] × sum[g] over the sixteen groups, × 32.
            let offset = _mm256_add_epi32(
                _mm256_mullo_epi32(
                    _mm256_cvtepi8_epi32(scale_bytes),
                    _mm256_loadu_si256(group_sums as *const __m256i),
                ),
                _mm256_mullo_epi32(
                    _mm256_cvtepi8_epi32(_mm_srli_si128(scale_bytes, 8)),
                    _mm256_loadu_si256(group_sums.add(8) as *const __m256i),
                ),
            );
            let mut integer = _mm256_setzero_si256();
            for (half_block, half_scales) in halves.iter().enumerate() {
                let low_a = _mm256_loadu_si256(block.add(q6_k::QL + 64 * half_block) as *const __m256i);
                let low_b = _mm256_loadu_si256(block.add(q6_k::QL + 64 * half_block + 32) as *const __m256i);
                let high = _mm256_loadu_si256(block.add(q6_k::QH + 32 * half_block) as *const __m256i);
                let values = [
                    _mm256_or_si256(
                        _mm256_and_si256(low_a, low_nibbles),
                        _mm256_slli_epi16(_mm256_and_si256(high, two_bits), 4),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(low_b, low_nibbles),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2), two_bits), 4),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16(low_a, 4), low_nibbles),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 4), two_bits), 4),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16(low_b, 4), low_nibbles),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 6), two_bits), 4),
                    ),
                ];
                for (quarter, weights) in values.into_iter().enumerate() {
                    let first = 128 * half_block + 32 * quarter;
                    let quants = _mm256_loadu_si256(activations.add(first) as *const __m256i);
                    let scales = _mm256_shuffle_epi8(*half_scales, controls[quarter]);
                    integer = _mm256_add_epi32(
                        integer,
                        _mm256_madd_epi16(_mm256_maddubs_epi16(weights, quants), scales),
                    );
                }
            }
            integer = _mm256_sub_epi32(integer, _mm256_slli_epi32(offset, 5));
            let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(u16::from_le_bytes([
                *block.add(q6_k::D),
                *block.add(q6_k::D + 1),
            ])))));
            sums = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(integer),
                _mm256_set1_ps(d * *x.scales.get_unchecked(index)),
                sums,
            );
        }
    }
    // SAFETY: AVX2 is present (this function's own requirement).
    unsafe { sum_lanes(sums) }
}

/// One Q8_0 row against Q8_0 activations with AVX2, as llama.cpp's
/// `ggml_vec_dot_q8_0_q8_0`: per block, the 32 signed products summed by
/// `maddubs` (the weight's sign moved onto the activation, so one side is
/// unsigned) and `madd`, converted to f32 and scaled into eight running
/// sums. (Widening the block's scale with F16C here, as the K-quants do,
/// measured a third slower on the 2-core EPYC: 15 against 22 tok/s on the
/// 1B Q8_0; the `half` crate's conversion stays.)
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q8_0_row(blocks: &[u8], x: &Int8Activations) -> f32 {
    use crate::quant::formats::q8_0;
    use std::arch::x86_64::*;
    let ones = _mm256_set1_epi16(1);
    let mut sums = _mm256_setzero_ps();
    for (index, block) in blocks.chunks_exact(q8_0::BYTES).enumerate() {
        let activations = &x.quants[index * 32..index * 32 + 32];
        let scale = half::f16::from_le_bytes([block[0], block[1]]).to_f32() * x.scales[index];
        if index % 2 == 0 {
            prefetch_ahead(block.as_ptr(), 64);
        }
        // SAFETY: 32 readable bytes at each pointer (a block's quants; the
        // block's activations), unaligned loads.
        let (weights, values) = unsafe {
            (
                _mm256_loadu_si256(block.as_ptr().add(q8_0::QS) as *const __m256i),
                _mm256_loadu_si256(activations.as_ptr() as *const __m256i),
            )
        };
        let magnitudes = _mm256_sign_epi8(weights, weights);
        let signed = _mm256_sign_epi8(values, weights);
        let pairs = _mm256_maddubs_epi16(magnitudes, signed);
        let quads = _mm256_madd_epi16(pairs, ones);
        sums = _mm256_fmadd_ps(_mm256_cvtepi32_ps(quads), _mm256_set1_ps(scale), sums);
    }
    // SAFETY: AVX2 is present (this function's own requirement).
    unsafe { sum_lanes(sums) }
}

/// Whether the CPU has AVX2 and FMA, checked once.
pub(super) fn available() -> bool {
    static AVX2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVX2.get_or_init(|| {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    })
}

#[cfg(test)]
mod tests {
    use crate::quant::{Int8Activations, QuantFormat, quantize_activations};
    use crate::rng::SplitMix64;

    /// The AVX2 products equal the portable integer ones to f32 rounding
    /// (the integer sums are exact; only the lanes' order of float sums differs).
    #[test]
    fn avx2_products_equal_the_portable_ones() {
        if !super::available() {
            eprintln!("SKIPPED: this CPU has no AVX2");
            return;
        }
        let mut rng = SplitMix64::new(0xa2);
        for (format, row) in [
            (
                QuantFormat::Q8_0,
                super::q8_0_row as unsafe fn(&[u8], &Int8Activations) -> f32,
            ),
            (QuantFormat::Q4_K, super::q4_k_row),
            (QuantFormat::Q6_K, super::q6_k_row),
        ] {
            for columns in [256usize, 1024, 2048] {
                let weights: Vec<f32> = (0..columns).map(|_| rng.next_f32() * 4.0 - 2.0).collect();
                let x: Vec<f32> = (0..columns).map(|_| rng.next_f32() * 2.0 - 1.0).collect();
                let mut blocks = vec![0u8; format.row_bytes(columns).unwrap()];
                format.quantize_row(&weights, &mut blocks).unwrap();
                let mut activations = Int8Activations::default();
                quantize_activations(&x, format.int8_block().unwrap(), &mut activations);
                let portable = format.dot_row_int8(&blocks, &activations).unwrap();
                // SAFETY: AVX2 was checked above.
                let fast = unsafe { row(&blocks, &activations) };
                let magnitude: f32 = weights.iter().zip(&x).map(|(w, x)| (w * x).abs()).sum();
                assert!(
                    (fast - portable).abs() <= 1e-5 * magnitude,
                    "{format} {columns}: {fast} vs {portable}"
                );
            }
        }
    }
}
