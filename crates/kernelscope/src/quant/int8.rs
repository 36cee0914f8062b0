//! Decode's fast CPU product over quantized weights, as llama.cpp computes
//! it: the activation vector is quantized once per mat-vec to 8-bit
//! blocks (llama.cpp's `block_q8_0` for 32-element formats, `block_q8_K`
//! for the K-quants), and each weight block meets its activation block in
//! integer arithmetic (one scale multiply per block or sub-block), which
//! reads each weight byte once and does 4–8 times less float work than
//! dequantizing to f32. The integer sums are exact, so every instruction
//! set gives the same bits; the loops are written for the compiler to
//! vectorise (`ops::quantized::linear` compiles them for AVX2 where the CPU
//! has it). The exact f32 product stays `QuantFormat::dot_row`. Each
//! format's own product lives in its file (`BlockFormat::dot_int8`);
//! this file quantizes the activations they meet.

use half::f16;

use super::shared::nearest_int;

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
