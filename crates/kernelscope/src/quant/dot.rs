//! The dot product of a quantized row with an f32 vector: the CPU reference
//! of a quantized mat-vec. Each block is dequantized into a stack array and
//! multiplied into eight running sums, so nothing is allocated and the
//! compiler can keep the sums in one SIMD register.

use super::Codec;

/// Lanes of the running sum: eight f32 fill one AVX register.
const LANES: usize = 8;

/// `Σ dequantized[i] × x[i]` over whole blocks; the caller has checked that
/// `blocks` holds exactly the blocks of `x.len()` elements.
pub(super) fn dot_blocks<C: Codec<BYTES, ELEMENTS>, const BYTES: usize, const ELEMENTS: usize>(
    blocks: &[u8],
    x: &[f32],
) -> f32 {
    let (blocks, _) = blocks.as_chunks::<BYTES>();
    let (x, _) = x.as_chunks::<ELEMENTS>();
    let mut sums = [0.0f32; LANES];
    let mut values = [0.0f32; ELEMENTS];
    for (block, x) in blocks.iter().zip(x) {
        C::dequantize(block, &mut values);
        // Both block sizes (32, 256) are multiples of LANES, so no tail.
        let (values, _) = values.as_chunks::<LANES>();
        let (x, _) = x.as_chunks::<LANES>();
        for (values, x) in values.iter().zip(x) {
            for lane in 0..LANES {
                sums[lane] += values[lane] * x[lane];
            }
        }
    }
    // Pairwise, which keeps the last additions' rounding small.
    let quarter = [
        sums[0] + sums[4],
        sums[1] + sums[5],
        sums[2] + sums[6],
        sums[3] + sums[7],
    ];
    (quarter[0] + quarter[2]) + (quarter[1] + quarter[3])
}
