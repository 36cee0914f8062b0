//! The weight element types widened to f32, and the portable eight-lane
//! dot loop every CPU path falls back to: below the SIMD paths of `dot`.

use half::{bf16, f16};

use crate::runtime::Element;

/// Weight element types the ops read, widened to f32 on load; also the
/// dtypes an op may narrow its f32 result to (a GEMM's input is kept in the
/// weights' dtype).
pub trait WeightElement: Element + Copy {
    /// The value as f32 (exact for every weight dtype).
    fn to_f32(self) -> f32;

    /// `value` rounded to nearest, ties to even, as torch's `.to(dtype)`
    /// and the CUDA prelude's `from_f32` do; NaN stays NaN.
    fn from_f32(value: f32) -> Self;
}

impl WeightElement for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }

    #[inline(always)]
    fn from_f32(value: f32) -> Self {
        value
    }
}

impl WeightElement for bf16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        // bf16 is the top half of an f32: widening is a shift (and vectorises).
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }

    #[inline(always)]
    fn from_f32(value: f32) -> Self {
        bf16::from_f32(value)
    }
}

impl WeightElement for f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }

    #[inline(always)]
    fn from_f32(value: f32) -> Self {
        f16::from_f32(value)
    }
}

/// The eight-lane loop; `FUSED` uses fused multiply-add, which is only fast
/// where the target has FMA.
#[inline(always)]
pub(crate) fn dot_lanes<W: WeightElement, const FUSED: bool>(row: &[W], x: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let row_chunks = row.chunks_exact(8);
    let x_chunks = x.chunks_exact(8);
    let (row_tail, x_tail) = (row_chunks.remainder(), x_chunks.remainder());
    for (w, v) in row_chunks.zip(x_chunks) {
        for lane in 0..8 {
            lanes[lane] = if FUSED {
                w[lane].to_f32().mul_add(v[lane], lanes[lane])
            } else {
                lanes[lane] + w[lane].to_f32() * v[lane]
            };
        }
    }
    let mut sum =
        ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    for (w, v) in row_tail.iter().zip(x_tail) {
        sum += w.to_f32() * v;
    }
    sum
}
