//! What one quantized format's file provides ([`BlockFormat`]), and the
//! row loops every format shares on top of it: dequantize, quantize and the
//! f32 dot product block by block, each block handed over as a fixed-size
//! array so the per-element indexing inside needs no bounds checks.

use super::int8::Int8Activations;

/// A field of a block: where it starts in ggml's block and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Offset of the field in the block.
    pub offset: usize,
    /// Its length in bytes.
    pub bytes: usize,
}

/// A field at `offset` of `bytes` bytes.
pub(crate) const fn field(offset: usize, bytes: usize) -> Field {
    Field { offset, bytes }
}

/// One block format, all in one file (`quant/formats/<format>.rs`):
/// `BYTES` and `ELEMENTS` are the file's `BYTES` (the size of its `Block`
/// struct, checked at compile time against ggml's) and `ELEMENTS`.
pub(crate) trait BlockFormat<const BYTES: usize, const ELEMENTS: usize> {
    /// ggml's type id (`GGML_TYPE_*`), as GGUF files store it.
    const GGML_TYPE: u32;
    /// The lowercase name of kernel names and the command line (`q4_k`).
    const NAME: &'static str;
    /// The name llama.cpp prints (`Q4_K`).
    const GGML_NAME: &'static str;
    /// The fields in the order their planes follow one another in a GPU
    /// row (`quant::planes`): the values first (16-byte multiples), then
    /// the 4-byte fields, then the 2-byte ones, covering the block once.
    const PLANES: &'static [Field];
    /// The activation block the integer product takes (32: `block_q8_0`,
    /// 256: `block_q8_K`), or `None` where there is none and products stay
    /// in f32. Set it together with [`dot_int8`](Self::dot_int8).
    const INT8_BLOCK: Option<usize> = None;

    /// One block to f32, bit-identical to llama.cpp's `dequantize_row_*`.
    fn dequantize(block: &[u8; BYTES], out: &mut [f32; ELEMENTS]);

    /// One block from f32, byte-identical to llama.cpp's `quantize_row_*_ref`.
    fn quantize(values: &[f32; ELEMENTS], block: &mut [u8; BYTES]);

    /// `Σ weight[i] × activation[i]` of a row of whole blocks against
    /// activations quantized to [`INT8_BLOCK`](Self::INT8_BLOCK), or `None`
    /// where the format has no integer product.
    #[inline(always)]
    fn dot_int8(_blocks: &[u8], _activations: &Int8Activations) -> Option<f32> {
        None
    }
}

/// Dequantizes whole blocks; lengths are checked by the caller.
#[inline(always)]
pub(crate) fn dequantize_blocks<Format, const BYTES: usize, const ELEMENTS: usize>(
    blocks: &[u8],
    out: &mut [f32],
) where
    Format: BlockFormat<BYTES, ELEMENTS>,
{
    let (blocks, _) = blocks.as_chunks::<BYTES>();
    let (out, _) = out.as_chunks_mut::<ELEMENTS>();
    for (block, out) in blocks.iter().zip(out) {
        Format::dequantize(block, out);
    }
}

/// Quantizes whole blocks; lengths are checked by the caller.
pub(crate) fn quantize_blocks<Format, const BYTES: usize, const ELEMENTS: usize>(
    values: &[f32],
    out: &mut [u8],
) where
    Format: BlockFormat<BYTES, ELEMENTS>,
{
    let (values, _) = values.as_chunks::<ELEMENTS>();
    let (out, _) = out.as_chunks_mut::<BYTES>();
    for (values, block) in values.iter().zip(out) {
        Format::quantize(values, block);
    }
}

/// Lanes of the f32 dot product's running sum: eight f32 fill one AVX
/// register.
const LANES: usize = 8;

/// `Σ dequantized[i] × x[i]` over whole blocks (the CPU reference of a
/// quantized mat-vec): each block is dequantized into a stack array and
/// multiplied into eight running sums, so nothing is allocated and the
/// compiler can keep the sums in one SIMD register. The caller has checked
/// that `blocks` holds exactly the blocks of `x.len()` elements.
pub(crate) fn dot_blocks<Format, const BYTES: usize, const ELEMENTS: usize>(blocks: &[u8], x: &[f32]) -> f32
where
    Format: BlockFormat<BYTES, ELEMENTS>,
{
    let (blocks, _) = blocks.as_chunks::<BYTES>();
    let (x, _) = x.as_chunks::<ELEMENTS>();
    let mut sums = [0.0f32; LANES];
    let mut values = [0.0f32; ELEMENTS];
    for (block, x) in blocks.iter().zip(x) {
        Format::dequantize(block, &mut values);
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
