//! The Q8_0 and Q4_K row products on AVX-512 VNNI, twice AVX2's width:
//! Q8_0 two 32-element blocks per register and one `vpdpbusd` where AVX2
//! takes `maddubs` and `madd`, Q4_K four sub-blocks per register with
//! `vpdpwssd` applying their scales, so a core keeps up with a larger share
//! of the memory's rate. x86-64 only; `available` says whether this CPU
//! runs them, checked once.

use crate::quant::Int8Activations;
use crate::quant::formats::q8_0;

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
        crate::cpu_simd::prefetch::prefetch_ahead(first.as_ptr(), 128);
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

/// One Q4_K row against Q8_K activations in 512-bit registers: per block,
/// two 64-byte loads of nibbles, each holding four 32-element sub-blocks
/// (low nibbles: sub-blocks 2p and 2p + 2; high: 2p + 1 and 2p + 3), their
/// activations gathered into the same order by 128-bit lane shuffles, the
/// products summed by `maddubs` and the sub-block scales applied and added
/// by `vpdpwssd` (VNNI's `madd` and add in one). The minimums are done as
/// in the AVX2 kernel, eight lanes at a time.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn q4_k_row(blocks: &[u8], x: &Int8Activations) -> f32 {
    use crate::quant::formats::q4_k;
    use crate::quant::k_scales::scales_mins_k4;
    use std::arch::x86_64::*;
    let count = blocks.len() / q4_k::BYTES;
    assert!(x.quants.len() >= count * 256 && x.sums.len() >= count * 16 && x.scales.len() >= count);
    let low_nibbles = _mm512_set1_epi8(0x0F);
    // 16-bit lane i of a scale vector takes scale `first` (i < 16) or `second`.
    let pick = |first: i16, second: i16| {
        let mut lanes = [first; 32];
        lanes[16..].fill(second);
        // SAFETY: 32 i16 lanes are 64 bytes, loaded unaligned.
        unsafe { _mm512_loadu_si512(lanes.as_ptr() as *const __m512i) }
    };
    // For the two halves of a block: (low nibbles' scales, high nibbles').
    let picks = [(pick(0, 2), pick(1, 3)), (pick(4, 6), pick(5, 7))];
    let mut sums = _mm512_setzero_ps();
    let mut minimum_sums = _mm256_setzero_ps();
    for index in 0..count {
        // SAFETY: block `index` is whole within `blocks`, and the
        // activations hold 256 quants, 16 sums and a scale per block
        // (asserted above); every load below is unaligned and in bounds.
        unsafe {
            let block = blocks.as_ptr().add(index * q4_k::BYTES);
            crate::cpu_simd::prefetch::prefetch_ahead(block, q4_k::BYTES);
            let packed: &[u8; 12] = &*(block.add(q4_k::SCALES) as *const [u8; 12]);
            let (scales, mins) = scales_mins_k4(packed);
            let d_dmin = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes([
                *block.add(q4_k::D),
                *block.add(q4_k::D + 1),
                *block.add(q4_k::DMIN),
                *block.add(q4_k::DMIN + 1),
            ])));
            let d = _mm_cvtss_f32(d_dmin);
            let dmin = _mm_cvtss_f32(_mm_shuffle_ps(d_dmin, d_dmin, 1));
            let scales16 =
                _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_set1_epi64x(i64::from_le_bytes(scales))));
            let activations = x.quants.as_ptr().add(index * 256);
            let mut integer = _mm512_setzero_si512();
            for (half, &(pick_low, pick_high)) in picks.iter().enumerate() {
                let nibbles = _mm512_loadu_si512(block.add(q4_k::QS + 64 * half) as *const __m512i);
                let low = _mm512_and_si512(nibbles, low_nibbles);
                let high = _mm512_and_si512(_mm512_srli_epi16(nibbles, 4), low_nibbles);
                // Pairs 2·half and 2·half + 1: 128 activations, each pair's
                // first 32 for its low nibbles and last 32 for its high.
                let first = _mm512_loadu_si512(activations.add(128 * half) as *const __m512i);
                let second = _mm512_loadu_si512(activations.add(128 * half + 64) as *const __m512i);
                let values_low = _mm512_shuffle_i64x2::<0x44>(first, second);
                let values_high = _mm512_shuffle_i64x2::<0xEE>(first, second);
                integer = _mm512_dpwssd_epi32(
                    integer,
                    _mm512_maddubs_epi16(low, values_low),
                    _mm512_permutexvar_epi16(pick_low, scales16),
                );
                integer = _mm512_dpwssd_epi32(
                    integer,
                    _mm512_maddubs_epi16(high, values_high),
                    _mm512_permutexvar_epi16(pick_high, scales16),
                );
            }
            let scale = *x.scales.get_unchecked(index);
            // Minimums: mins[s] × (the sum of sub-block s's 32 quants).
            let mins = _mm256_cvtepu8_epi32(_mm_set1_epi64x(i64::from_le_bytes(mins)));
            let group_sums = x.sums.as_ptr().add(index * 16);
            let pairs = super::avx2::sub_block_sums(group_sums);
            minimum_sums = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(_mm256_mullo_epi32(mins, pairs)),
                _mm256_set1_ps(dmin * scale),
                minimum_sums,
            );
            sums = _mm512_fmadd_ps(_mm512_cvtepi32_ps(integer), _mm512_set1_ps(d * scale), sums);
        }
    }
    let minimum = _mm512_reduce_add_ps(_mm512_zextps256_ps512(minimum_sums));
    _mm512_reduce_add_ps(sums) - minimum
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
