//! The CPU prefill product of quantized weights on AVX-512 BF16, as CUDA's
//! (`gemm.rs`) runs it on tensor cores: each group of weight rows is
//! dequantized a pass at a time into a bf16 scratch of a few tens of
//! kilobytes, which the bf16 GEMM's register tile then multiplies with
//! every token of a block (`ops::matmul::cpu_bf16`). The tokens are rounded
//! to bf16 once per call.
//!
//! Each weight is rounded to bf16 (8 bits of precision) and so is each
//! activation, where the integer product (`matmul_<format>_q8`, llama.cpp's
//! way) rounds each activation to 8 bits of its block's largest; both
//! multiply exactly and sum in f32. The bf16 tiles measured faster: the
//! GEMM's `vdpbf16ps` does 32 products an instruction, and the integer
//! product's per-block scaling a few more instructions per 32.

use std::ops::Range;

use half::bf16;

use crate::error::{Error, Result};
use crate::ops::matmul::cpu_bf16::{Bf16Rows, DEPTH_CHUNK, GROUP_ROWS, product_of, round_to_bf16};
use crate::quant::QuantFormat;
use crate::runtime::KernelArgs;

use super::cpu::operands;

/// Quantized weight rows of `format`, `row_bytes` each, dequantized to bf16
/// a pass at a time.
struct Dequantized<'a> {
    format: QuantFormat,
    weight: &'a [u8],
    row_bytes: usize,
}

/// A task's scratch: one row's pass in f32, and the group's in bf16.
#[derive(Default)]
struct Scratch {
    values: Vec<f32>,
    rows: Vec<bf16>,
}

impl Bf16Rows for Dequantized<'_> {
    type Scratch = Scratch;
    const IN_PLACE: bool = false;

    fn rows<'a>(
        &'a self,
        first_row: usize,
        count: usize,
        depth: Range<usize>,
        scratch: &'a mut Scratch,
    ) -> [&'a [bf16]; GROUP_ROWS] {
        let (block_elements, block_bytes) = (self.format.block_elements(), self.format.block_bytes());
        let length = depth.len();
        scratch.values.resize(length, 0.0);
        scratch.rows.resize(GROUP_ROWS * length, bf16::ZERO);
        let bytes = depth.start / block_elements * block_bytes..depth.end / block_elements * block_bytes;
        for (index, row) in scratch.rows.chunks_exact_mut(length).take(count).enumerate() {
            let start = (first_row + index) * self.row_bytes;
            let blocks = &self.weight[start + bytes.start..start + bytes.end];
            // SAFETY: only built where the CPU has AVX-512 F, BW, VL and
            // BF16 (`quantized_matmul_bf16` checks).
            unsafe { dequantize_to_bf16(self.format, blocks, &mut scratch.values, row) };
        }
        let rows = &scratch.rows;
        std::array::from_fn(|index| {
            let index = index.min(count - 1);
            &rows[index * length..(index + 1) * length]
        })
    }
}

/// `blocks` dequantized into `values` and rounded to bf16 into `out`,
/// compiled for AVX-512 so that the format's dequantization loops (inlined)
/// are vectorised as wide as the CPU goes, and rounded 32 values an
/// instruction (`vcvtne2ps2bf16`: nearest, ties to even, as
/// `bf16::from_f32`); dequantization and rounding cost the GEMM itself
/// again in SSE2 (a profile of a Q4_K_M prefill).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
fn dequantize_to_bf16(format: QuantFormat, blocks: &[u8], values: &mut [f32], out: &mut [bf16]) {
    use std::arch::x86_64::*;
    // The lengths agree (whole blocks, checked by the caller), so this
    // cannot fail; NaN would show a broken promise.
    if format.dequantize_row(blocks, values).is_err() {
        values.fill(f32::NAN);
    }
    let whole = values.len().min(out.len()) / 32 * 32;
    let (values, values_rest) = values.split_at(whole);
    let (out, out_rest) = out.split_at_mut(whole);
    for (values, out) in values.chunks_exact(32).zip(out.chunks_exact_mut(32)) {
        // SAFETY: 32 f32 read and 32 bf16 written, unaligned, in bounds.
        unsafe {
            let low = _mm512_loadu_ps(values.as_ptr());
            let high = _mm512_loadu_ps(values.as_ptr().add(16));
            let pairs = _mm512_cvtne2ps_pbh(high, low);
            _mm512_storeu_si512(
                out.as_mut_ptr().cast(),
                std::mem::transmute::<__m512bh, __m512i>(pairs),
            );
        }
    }
    round_to_bf16(values_rest, out_rest);
}

/// `out` f32 `[rows, n]` = `x` f32 `[rows, k]` times the transpose of
/// `weight`'s `n` rows of `k` elements in `format`'s blocks, on bf16 tiles.
/// Only where the CPU takes the bf16 GEMM (`ops::matmul::uses_bf16_products`).
pub(super) fn quantized_matmul_bf16(format: QuantFormat, args: &KernelArgs<'_>) -> Result<()> {
    let kernel = format!("matmul_{}_bf16", format.name());
    let operands = operands(format, &kernel, args)?;
    let (n, k, rows) = (operands.n, operands.k, operands.rows);
    if !crate::ops::matmul::uses_bf16_products(crate::runtime::DType::BF16) {
        return Err(Error::KernelFailed {
            kernel,
            message: "this CPU has no AVX-512 BF16 products; run the integer product (matmul_<format>_q8)"
                .into(),
        });
    }
    if !DEPTH_CHUNK.is_multiple_of(format.block_elements()) {
        return Err(Error::KernelFailed {
            kernel,
            message: format!("{format} blocks do not divide a pass of {DEPTH_CHUNK} values"),
        });
    }
    if n == 0 || rows == 0 || k == 0 {
        operands.out[..rows * n].fill(0.0);
        return Ok(());
    }
    let mut tokens = vec![bf16::ZERO; rows * k];
    round_to_bf16(&operands.x[..rows * k], &mut tokens);
    let weights = Dequantized {
        format,
        weight: operands.weight,
        row_bytes: operands.row_bytes,
    };
    product_of(&weights, &tokens, &mut operands.out[..rows * n], [rows, n, k]);
    Ok(())
}
