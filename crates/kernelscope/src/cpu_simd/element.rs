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

/// The eight-lane loop, four sums of eight lanes so that consecutive
/// multiply-adds do not wait on each other's latency (one sum held an AVX2
/// bf16 decode of the 1B at 5.1 tok/s on the 2-core Zen EPYC, against 8.2
/// with independent sums); `FUSED` uses fused multiply-add, which is only
/// fast where the target has FMA.
#[inline(always)]
pub(crate) fn dot_lanes<W: WeightElement, const FUSED: bool>(row: &[W], x: &[f32]) -> f32 {
    const LANES: usize = 8;
    const SUMS: usize = 4;
    let mut lanes = [[0f32; LANES]; SUMS];
    let row_chunks = row.chunks_exact(LANES * SUMS);
    let x_chunks = x.chunks_exact(LANES * SUMS);
    let (row_tail, x_tail) = (row_chunks.remainder(), x_chunks.remainder());
    for (w, v) in row_chunks.zip(x_chunks) {
        for (sum, lanes) in lanes.iter_mut().enumerate() {
            for lane in 0..LANES {
                let (w, v) = (w[sum * LANES + lane].to_f32(), v[sum * LANES + lane]);
                lanes[lane] = if FUSED {
                    w.mul_add(v, lanes[lane])
                } else {
                    lanes[lane] + w * v
                };
            }
        }
    }
    let mut sums = [0f32; LANES];
    for lanes in lanes {
        for lane in 0..LANES {
            sums[lane] += lanes[lane];
        }
    }
    let mut sum = ((sums[0] + sums[4]) + (sums[1] + sums[5])) + ((sums[2] + sums[6]) + (sums[3] + sums[7]));
    for (w, v) in row_tail.iter().zip(x_tail) {
        sum = if FUSED {
            w.to_f32().mul_add(*v, sum)
        } else {
            sum + w.to_f32() * v
        };
    }
    sum
}
