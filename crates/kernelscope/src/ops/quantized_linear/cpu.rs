//! CPU reference of the quantized products: weight rows in parallel, each
//! read in its blocks. One position dots the row's blocks with x directly;
//! a chunk of rows dequantizes each weight row once into a scratch row and
//! dots it with every input row, so the weights are read once per chunk.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ops::dot;
use crate::quant::{Int8Activations, QuantFormat, quantize_activations};
use crate::runtime::KernelArgs;

use super::{K, N, OUT, ROWS, WEIGHT, X};

/// Weight rows per parallel task.
const ROWS_PER_TASK: usize = 16;

/// A quantized product's operands, checked against its scalars.
struct Operands<'a> {
    weight: &'a [u8],
    x: &'a [f32],
    out: &'a mut [f32],
    n: usize,
    k: usize,
    rows: usize,
    row_bytes: usize,
}

/// The operands of `kernel`'s dispatch: `n` weight rows of `k` elements in
/// `format`'s blocks, `rows` input and output rows, each buffer at least
/// as long as its shape.
fn operands<'a>(format: QuantFormat, kernel: &str, args: &'a KernelArgs<'_>) -> Result<Operands<'a>> {
    let weight = args.input::<u8>(WEIGHT)?;
    let x = args.input::<f32>(X)?;
    let out = args.output::<f32>(OUT)?;
    let (n, k, rows) = (
        args.u32(N)? as usize,
        args.u32(K)? as usize,
        args.u32(ROWS)? as usize,
    );
    let failed = |message: String| Error::KernelFailed {
        kernel: kernel.to_string(),
        message,
    };
    let row_bytes = format
        .row_bytes(k)
        .ok_or_else(|| failed(format!("{k} elements are not whole {format} blocks")))?;
    if weight.len() < n * row_bytes || x.len() < rows * k || out.len() < rows * n {
        return Err(failed("a buffer is shorter than its shape".into()));
    }
    Ok(Operands {
        weight,
        x,
        out,
        n,
        k,
        rows,
        row_bytes,
    })
}

/// `out` f32 `[rows, n]` = `x` f32 `[rows, k]` times the transpose of
/// `weight`, `n` rows of `k` elements in `format`'s blocks.
pub(super) fn quantized_product(format: QuantFormat, args: &KernelArgs<'_>) -> Result<()> {
    let kernel = format!("matmul_{}", format.name());
    let Operands {
        weight,
        x,
        out,
        n,
        k,
        rows,
        row_bytes,
    } = operands(format, &kernel, args)?;
    let failed = |message: String| Error::KernelFailed {
        kernel: kernel.clone(),
        message,
    };
    // Each task computes its weight rows for every input row, then the
    // results are placed: out is [rows, n], so a task's outputs are strided.
    let results: Vec<Result<Vec<f32>>> = (0..n.div_ceil(ROWS_PER_TASK))
        .into_par_iter()
        .map(|task| {
            let first = task * ROWS_PER_TASK;
            let last = (first + ROWS_PER_TASK).min(n);
            let mut values = Vec::with_capacity((last - first) * rows);
            let mut scratch = vec![0.0f32; if rows > 1 { k } else { 0 }];
            for row in first..last {
                let blocks = &weight[row * row_bytes..(row + 1) * row_bytes];
                if rows == 1 {
                    values.push(
                        format
                            .dot_row(blocks, &x[..k])
                            .map_err(|error| failed(error.to_string()))?,
                    );
                } else {
                    format
                        .dequantize_row(blocks, &mut scratch)
                        .map_err(|error| failed(error.to_string()))?;
                    values.extend(x.chunks_exact(k).take(rows).map(|input| dot(&scratch, input)));
                }
            }
            Ok(values)
        })
        .collect();
    for (task, values) in results.into_iter().enumerate() {
        let values = values?;
        let first = task * ROWS_PER_TASK;
        for (offset, per_row) in values.chunks_exact(rows).enumerate() {
            for (r, value) in per_row.iter().enumerate() {
                out[r * n + first + offset] = *value;
            }
        }
    }
    Ok(())
}

/// `out` f32 `[n]` = `weight` `[n, k]` · `x` f32 `[k]` with `x` quantized
/// once to 8-bit blocks and each weight block multiplied in integers
/// (`QuantFormat::dot_row_int8`), rows in parallel.
pub(super) fn quantized_product_int8(format: QuantFormat, args: &KernelArgs<'_>) -> Result<()> {
    let kernel = format!("matvec_{}_q8", format.name());
    let Operands {
        weight,
        x,
        out,
        n,
        k,
        rows,
        row_bytes,
    } = operands(format, &kernel, args)?;
    let block = format
        .int8_block()
        .filter(|block| rows == 1 && k.is_multiple_of(*block));
    let Some(block) = block else {
        return Err(Error::KernelFailed {
            kernel,
            message: format!("one row of whole {format} blocks with an integer product"),
        });
    };
    let mut activations = Int8Activations::default();
    quantize_activations(&x[..k], block, &mut activations);
    out[..n]
        .par_chunks_mut(ROWS_PER_TASK)
        .enumerate()
        .for_each(|(task, chunk)| {
            rows_int8(
                format,
                &weight[task * ROWS_PER_TASK * row_bytes..],
                row_bytes,
                &activations,
                chunk,
            )
        });
    Ok(())
}

/// `out` f32 `[rows, n]` = `x` f32 `[rows, k]` times the transpose of
/// `weight`, as [`quantized_product_int8`] does one row: every input row
/// quantized once to 8-bit blocks, then each task's weight rows (a few
/// kilobytes, held in cache) multiplied in integers with every input row,
/// so the weights are read once per chunk. In f32 (`quantized_product`)
/// a prefill chunk ran at a fifth of llama.cpp's speed on the 2-core EPYC:
/// each weight row dequantized and dotted in floats, four times the
/// instructions of the 8-bit products.
pub(super) fn quantized_matmul_int8(format: QuantFormat, args: &KernelArgs<'_>) -> Result<()> {
    let kernel = format!("matmul_{}_q8", format.name());
    let Operands {
        weight,
        x,
        out,
        n,
        k,
        rows,
        row_bytes,
    } = operands(format, &kernel, args)?;
    let Some(block) = format.int8_block().filter(|block| k.is_multiple_of(*block)) else {
        return Err(Error::KernelFailed {
            kernel,
            message: format!("rows of whole {format} blocks with an integer product"),
        });
    };
    let activations: Vec<Int8Activations> = x
        .chunks_exact(k)
        .take(rows)
        .map(|row| {
            let mut activations = Int8Activations::default();
            quantize_activations(row, block, &mut activations);
            activations
        })
        .collect();
    let results: Vec<Vec<f32>> = (0..n.div_ceil(ROWS_PER_TASK))
        .into_par_iter()
        .map(|task| {
            let first = task * ROWS_PER_TASK;
            let last = (first + ROWS_PER_TASK).min(n);
            let weights = &weight[first * row_bytes..last * row_bytes];
            // [input row][weight row] of this task.
            let mut values = vec![0.0f32; rows * (last - first)];
            let mut done = 0;
            #[cfg(target_arch = "x86_64")]
            if format == QuantFormat::Q4_K && avx2() {
                // Four input rows per pass over a weight row.
                let width = last - first;
                while done + 4 <= rows {
                    let tile = [
                        &activations[done],
                        &activations[done + 1],
                        &activations[done + 2],
                        &activations[done + 3],
                    ];
                    for row in 0..width {
                        let blocks = &weights[row * row_bytes..(row + 1) * row_bytes];
                        // SAFETY: the CPU has AVX2, FMA and F16C (checked above).
                        let products = unsafe { q4_k_rows_avx2::<4>(blocks, tile) };
                        for (r, product) in products.into_iter().enumerate() {
                            values[(done + r) * width + row] = product;
                        }
                    }
                    done += 4;
                }
            }
            for (input, chunk) in activations[done..]
                .iter()
                .zip(values[done * (last - first)..].chunks_exact_mut(last - first))
            {
                rows_int8(format, weights, row_bytes, input, chunk);
            }
            values
        })
        .collect();
    for (task, values) in results.iter().enumerate() {
        let first = task * ROWS_PER_TASK;
        let width = values.len() / rows.max(1);
        for (r, per_row) in values.chunks_exact(width.max(1)).enumerate() {
            out[r * n + first..r * n + first + width].copy_from_slice(per_row);
        }
    }
    Ok(())
}

/// `out[r]` for the rows of `weight` (row r at `r × row_bytes`), compiled
/// for AVX2 where the CPU has it: the integer loops vectorise there.
fn rows_int8(format: QuantFormat, weight: &[u8], row_bytes: usize, x: &Int8Activations, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked once at run time).
        unsafe { rows_int8_avx2(format, weight, row_bytes, x, out) };
        return;
    }
    rows_int8_portable(format, weight, row_bytes, x, out);
}

#[inline(always)]
fn rows_int8_portable(
    format: QuantFormat,
    weight: &[u8],
    row_bytes: usize,
    x: &Int8Activations,
    out: &mut [f32],
) {
    for (row, value) in out.iter_mut().enumerate() {
        let blocks = &weight[row * row_bytes..(row + 1) * row_bytes];
        *value = format.dot_row_int8(blocks, x).unwrap_or(f32::NAN);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_int8_avx2(
    format: QuantFormat,
    weight: &[u8],
    row_bytes: usize,
    x: &Int8Activations,
    out: &mut [f32],
) {
    let row_avx2 = match format {
        QuantFormat::Q8_0 => q8_0_row_avx2,
        QuantFormat::Q4_K => q4_k_row_avx2,
        QuantFormat::Q6_K => q6_k_row_avx2,
        _ => {
            rows_int8_portable(format, weight, row_bytes, x, out);
            return;
        }
    };
    for (row, value) in out.iter_mut().enumerate() {
        let blocks = &weight[row * row_bytes..(row + 1) * row_bytes];
        // SAFETY: AVX2, FMA and F16C are present (the caller checked).
        *value = unsafe { row_avx2(blocks, x) };
    }
}

/// The sum of the eight lanes.
#[cfg(target_arch = "x86_64")]
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4_k_row_avx2(blocks: &[u8], x: &Int8Activations) -> f32 {
    // SAFETY: AVX2, FMA and F16C are present (this function's requirement).
    unsafe { q4_k_rows_avx2::<1>(blocks, [x])[0] }
}

/// [`q4_k_row_avx2`] for `R` input rows at once (a prefill chunk's): each
/// block's scales, minimums and nibbles unpacked once and multiplied with
/// every row's activations.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4_k_rows_avx2<const R: usize>(blocks: &[u8], xs: [&Int8Activations; R]) -> [f32; R] {
    use crate::quant::blocks::{q4_k, scales_mins_k4};
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
                let pairs = _mm256_permute4x64_epi64(
                    _mm256_hadd_epi32(
                        _mm256_loadu_si256(group_sums as *const __m256i),
                        _mm256_loadu_si256(group_sums.add(8) as *const __m256i),
                    ),
                    0b11_01_10_00,
                );
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

/// One Q6_K row against Q8_K activations with AVX2, as llama.cpp's
/// `ggml_vec_dot_q6_K_q8_K`: the 6-bit values rebuilt from their low
/// nibbles and high bit pairs (unsigned 0..63, so `maddubs` takes them),
/// each 16-element group's signed scale applied by `madd` (broadcast by a
/// byte shuffle from the block's sixteen scales widened once), and the
/// offset of 32 taken off once per block as 32 × the scales times the
/// activations' 16-element sums.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q6_k_row_avx2(blocks: &[u8], x: &Int8Activations) -> f32 {
    use crate::quant::blocks::q6_k;
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q8_0_row_avx2(blocks: &[u8], x: &Int8Activations) -> f32 {
    use crate::quant::blocks::q8_0;
    use std::arch::x86_64::*;
    let ones = _mm256_set1_epi16(1);
    let mut sums = _mm256_setzero_ps();
    for (index, block) in blocks.chunks_exact(q8_0::BYTES).enumerate() {
        let activations = &x.quants[index * 32..index * 32 + 32];
        let scale = half::f16::from_le_bytes([block[0], block[1]]).to_f32() * x.scales[index];
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
#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    static AVX2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVX2.get_or_init(|| {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    })
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use crate::quant::{Int8Activations, QuantFormat, quantize_activations};
    use crate::rng::SplitMix64;

    /// The AVX2 products equal the portable integer ones to f32 rounding
    /// (the integer sums are exact; only the lanes' order of float sums differs).
    #[test]
    fn avx2_products_equal_the_portable_ones() {
        if !super::avx2() {
            eprintln!("SKIPPED: this CPU has no AVX2");
            return;
        }
        let mut rng = SplitMix64::new(0xa2);
        for (format, row) in [
            (
                QuantFormat::Q8_0,
                super::q8_0_row_avx2 as unsafe fn(&[u8], &Int8Activations) -> f32,
            ),
            (QuantFormat::Q4_K, super::q4_k_row_avx2),
            (QuantFormat::Q6_K, super::q6_k_row_avx2),
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
