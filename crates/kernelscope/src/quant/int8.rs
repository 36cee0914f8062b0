//! Decode's fast CPU product over quantized weights, as llama.cpp computes
//! it: the activation vector is quantized once per mat-vec to 8-bit
//! blocks (llama.cpp's `block_q8_0` for 32-element formats, `block_q8_K`
//! for the K-quants), and each weight block meets its activation block in
//! integer arithmetic (one scale multiply per block or sub-block), which
//! reads each weight byte once and does 4–8 times less float work than
//! dequantizing to f32. The integer sums are exact, so every instruction
//! set gives the same bits; the loops are written for the compiler to
//! vectorise (`ops::quantized::linear` compiles them for AVX2 where the CPU
//! has it). The exact f32 product stays `QuantFormat::dot_row`.

use half::f16;

use super::QuantFormat;
use super::blocks::{q4_k, q6_k, q8_0, scale_min_k4};
use super::quantize::nearest_int;

/// An activation vector quantized to 8-bit blocks.
#[derive(Clone, Debug, Default)]
pub struct Int8Activations {
    /// Elements per block (32 or 256).
    pub block: usize,
    /// One signed byte per element.
    pub quants: Vec<i8>,
    /// One scale per block (an f16-rounded value for 32-element blocks,
    /// as `block_q8_0` stores it; f32 for 256-element ones).
    pub scales: Vec<f32>,
    /// For 256-element blocks, the sum of each 16 quants (`block_q8_K`'s
    /// `bsums`), which the K-quants' minimums multiply.
    pub sums: Vec<i32>,
}

impl QuantFormat {
    /// The activation block size this format's integer product takes, or
    /// `None` where it has none yet (its products stay in f32).
    pub fn int8_block(self) -> Option<usize> {
        match self {
            QuantFormat::Q8_0 => Some(32),
            QuantFormat::Q4_K | QuantFormat::Q6_K => Some(256),
            _ => None,
        }
    }

    /// `Σ weight[i] × activation[i]` of a row of blocks with activations
    /// quantized by [`quantize_activations`] for this format's block, or
    /// `None` where the format has no integer product. The caller has
    /// checked that `blocks` holds exactly the row.
    #[inline(always)]
    pub fn dot_row_int8(self, blocks: &[u8], x: &Int8Activations) -> Option<f32> {
        Some(match self {
            QuantFormat::Q8_0 => dot_q8_0(blocks, x),
            QuantFormat::Q4_K => dot_q4_k(blocks, x),
            QuantFormat::Q6_K => dot_q6_k(blocks, x),
            _ => return None,
        })
    }
}

/// `x` quantized to blocks of `block` (32: llama.cpp's
/// `quantize_row_q8_0_ref`; 256: `quantize_row_q8_K_ref`) into `out`,
/// reusing its allocations. `x.len()` is a whole number of blocks.
pub fn quantize_activations(x: &[f32], block: usize, out: &mut Int8Activations) {
    out.block = block;
    out.quants.resize(x.len(), 0);
    out.scales.clear();
    out.sums.clear();
    for (values, quants) in x.chunks_exact(block).zip(out.quants.chunks_exact_mut(block)) {
        // A NaN makes the block's scale NaN, so every product over it is
        // NaN as the f32 product's would be: dropped by the maximum, it
        // would quantize to numbers and a NaN in the model would vanish.
        if values.iter().any(|value| value.is_nan()) {
            quants.fill(0);
            out.scales.push(f32::NAN);
            if block != 32 {
                out.sums.extend(std::iter::repeat_n(0, block / 16));
            }
            continue;
        }
        if block == 32 {
            let largest = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let scale = largest / 127.0;
            let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
            for (quant, value) in quants.iter_mut().zip(values) {
                *quant = (value * inverse).round() as i8;
            }
            out.scales.push(f16::from_f32(scale).to_f32());
        } else {
            // The value of largest magnitude keeps its sign: its quant is -127.
            let (mut largest, mut magnitude) = (0.0f32, 0.0f32);
            for &value in values {
                if value.abs() > magnitude {
                    magnitude = value.abs();
                    largest = value;
                }
            }
            if magnitude == 0.0 {
                quants.fill(0);
                out.scales.push(0.0);
                out.sums.extend([0; 16]);
                continue;
            }
            let inverse = -127.0 / largest;
            for (quant, value) in quants.iter_mut().zip(values) {
                *quant = nearest_int(inverse * value).min(127) as i8;
            }
            out.scales.push(1.0 / inverse);
            out.sums.extend(
                quants
                    .chunks_exact(16)
                    .map(|group| group.iter().map(|&q| i32::from(q)).sum::<i32>()),
            );
        }
    }
}

/// The f16 at `bytes[at..at + 2]`.
#[inline(always)]
fn half(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

/// `Σ a[i] × b[i]` of 32 signed bytes, exactly.
#[inline(always)]
fn dot32(a: &[i8; 32], b: &[i8]) -> i32 {
    let b: &[i8; 32] = b.try_into().expect("32 quants");
    let mut sum = 0i32;
    for i in 0..32 {
        sum += i32::from(a[i]) * i32::from(b[i]);
    }
    sum
}

#[inline(always)]
fn dot_q8_0(blocks: &[u8], x: &Int8Activations) -> f32 {
    let mut total = 0.0f32;
    for (index, block) in blocks.chunks_exact(q8_0::BYTES).enumerate() {
        let quants: &[i8; 32] = bytemuck::cast_ref(
            <&[u8; 32]>::try_from(&block[q8_0::QS..q8_0::QS + 32]).expect("a block's 32 quants"),
        );
        let sum = dot32(quants, &x.quants[index * 32..index * 32 + 32]);
        total += sum as f32 * (half(block, q8_0::D) * x.scales[index]);
    }
    total
}

#[inline(always)]
fn dot_q4_k(blocks: &[u8], x: &Int8Activations) -> f32 {
    let mut total = 0.0f32;
    for (index, block) in blocks.chunks_exact(q4_k::BYTES).enumerate() {
        let activations = &x.quants[index * 256..index * 256 + 256];
        let packed: &[u8; 12] = block[q4_k::SCALES..q4_k::SCALES + 12]
            .try_into()
            .expect("12 bytes");
        let nibbles = &block[q4_k::QS..q4_k::QS + 128];
        let (mut scaled, mut minimums) = (0i32, 0i32);
        for sub_block in 0..8 {
            let (scale, minimum) = scale_min_k4(sub_block, packed);
            // Sub-blocks 2g and 2g + 1 share 32 bytes: low then high nibbles.
            let bytes = &nibbles[(sub_block / 2) * 32..(sub_block / 2) * 32 + 32];
            let mut values = [0i8; 32];
            for (value, &byte) in values.iter_mut().zip(bytes) {
                *value = if sub_block % 2 == 0 {
                    (byte & 0x0F) as i8
                } else {
                    (byte >> 4) as i8
                };
            }
            let sum = dot32(&values, &activations[sub_block * 32..sub_block * 32 + 32]);
            scaled += i32::from(scale) * sum;
            minimums += i32::from(minimum)
                * (x.sums[index * 16 + 2 * sub_block] + x.sums[index * 16 + 2 * sub_block + 1]);
        }
        let scale = x.scales[index];
        total +=
            half(block, q4_k::D) * scale * scaled as f32 - half(block, q4_k::DMIN) * scale * minimums as f32;
    }
    total
}

#[inline(always)]
fn dot_q6_k(blocks: &[u8], x: &Int8Activations) -> f32 {
    let mut total = 0.0f32;
    for (index, block) in blocks.chunks_exact(q6_k::BYTES).enumerate() {
        let activations = &x.quants[index * 256..index * 256 + 256];
        let mut values = [0i8; 256];
        for half_block in 0..2 {
            let low = &block[q6_k::QL + 64 * half_block..q6_k::QL + 64 * half_block + 64];
            let high = &block[q6_k::QH + 32 * half_block..q6_k::QH + 32 * half_block + 32];
            let out = &mut values[128 * half_block..128 * half_block + 128];
            for l in 0..32 {
                out[l] = ((low[l] & 0x0F) | ((high[l] & 3) << 4)) as i8 - 32;
                out[l + 32] = ((low[l + 32] & 0x0F) | (((high[l] >> 2) & 3) << 4)) as i8 - 32;
                out[l + 64] = ((low[l] >> 4) | (((high[l] >> 4) & 3) << 4)) as i8 - 32;
                out[l + 96] = ((low[l + 32] >> 4) | (((high[l] >> 6) & 3) << 4)) as i8 - 32;
            }
        }
        let mut scaled = 0i32;
        for group in 0..16 {
            let mut sum = 0i32;
            for i in 0..16 {
                sum += i32::from(values[group * 16 + i]) * i32::from(activations[group * 16 + i]);
            }
            scaled += i32::from(block[q6_k::SCALES + group] as i8) * sum;
        }
        total += half(block, q6_k::D) * x.scales[index] * scaled as f32;
    }
    total
}
