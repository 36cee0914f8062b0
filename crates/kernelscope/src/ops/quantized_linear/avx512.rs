//! The Q8_0 row product on AVX-512 VNNI: two 32-element blocks per 512-bit
//! register and one `vpdpbusd` where AVX2 takes `maddubs` and `madd`, so a
//! core keeps up with a larger share of the memory's rate. x86-64 only;
//! `available` says whether this CPU runs it, checked once.

use crate::quant::Int8Activations;
use crate::quant::blocks::q8_0;

/// One Q8_0 row against Q8_0 activations: the same integer sums per block
/// as the AVX2 kernel (exact), scaled and summed in f32 in another order.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn q8_0_row(blocks: &[u8], x: &Int8Activations) -> f32 {
    use std::arch::x86_64::*;
    let count = blocks.len() / q8_0::BYTES;
    let zero = _mm512_setzero_si512();
    // Lane i of the scales takes product 0 (i < 8) or 1 (i >= 8).
    let halves = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    let mut sums = _mm512_setzero_ps();
    let mut index = 0;
    while index + 2 <= count {
        let first = &blocks[index * q8_0::BYTES..(index + 2) * q8_0::BYTES];
        super::avx2::prefetch_ahead(first.as_ptr(), 128);
        let activations = &x.quants[index * 32..index * 32 + 64];
        // SAFETY: 32 readable bytes at each block's quants and 64 at the
        // two blocks' activations; unaligned loads.
        let (weights, values) = unsafe {
            let low = _mm256_loadu_si256(first.as_ptr().add(q8_0::QS) as *const __m256i);
            let high = _mm256_loadu_si256(first.as_ptr().add(q8_0::BYTES + q8_0::QS) as *const __m256i);
            (
                _mm512_inserti64x4::<1>(_mm512_castsi256_si512(low), high),
                _mm512_loadu_si512(activations.as_ptr() as *const __m512i),
            )
        };
        // |w| as unsigned bytes (-128 becomes 128) times x with w's sign:
        // the activations never hold -128, so negating them is exact.
        let negative = _mm512_movepi8_mask(weights);
        let magnitudes = _mm512_abs_epi8(weights);
        let signed = _mm512_mask_sub_epi8(values, negative, zero, values);
        let quads = _mm512_dpbusd_epi32(zero, magnitudes, signed);
        let block_scales = _mm_cvtph_ps(_mm_set_epi16(
            0,
            0,
            0,
            0,
            0,
            0,
            i16::from_le_bytes([first[q8_0::BYTES], first[q8_0::BYTES + 1]]),
            i16::from_le_bytes([first[0], first[1]]),
        ));
        let products = _mm_mul_ps(
            block_scales,
            _mm_set_ps(0.0, 0.0, x.scales[index + 1], x.scales[index]),
        );
        let scales = _mm512_permutexvar_ps(halves, _mm512_castps128_ps512(products));
        sums = _mm512_fmadd_ps(_mm512_cvtepi32_ps(quads), scales, sums);
        index += 2;
    }
    let mut total = _mm512_reduce_add_ps(sums);
    if index < count {
        // An odd last block: the same product in 256 bits.
        let block = &blocks[index * q8_0::BYTES..(index + 1) * q8_0::BYTES];
        // SAFETY: 32 readable bytes at the block's quants and at its activations.
        let (weights, values) = unsafe {
            (
                _mm256_loadu_si256(block.as_ptr().add(q8_0::QS) as *const __m256i),
                _mm256_loadu_si256(x.quants[index * 32..].as_ptr() as *const __m256i),
            )
        };
        let negative = _mm256_movepi8_mask(weights);
        let signed = _mm256_mask_sub_epi8(values, negative, _mm256_setzero_si256(), values);
        let quads = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(weights), signed);
        let sum = _mm512_reduce_add_epi32(_mm512_zextsi256_si512(quads));
        let scale = half::f16::from_le_bytes([block[0], block[1]]).to_f32() * x.scales[index];
        total += sum as f32 * scale;
    }
    total
}

/// Whether the CPU has AVX-512 F, BW, VL and VNNI (and AVX2, FMA, F16C),
/// checked once.
pub(super) fn available() -> bool {
    static VNNI: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *VNNI.get_or_init(|| {
        super::avx2::available()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
    })
}
