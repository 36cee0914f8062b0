//! The layout quantized rows take on a GPU: each field of every block of a
//! row stored together ("planes": all the 4-bit values, then all the
//! scales), the row padded to 16 bytes. A block's values then start at a
//! 16-byte boundary whatever the block's size (Q8_0's 34 bytes, Q6_K's
//! 210), so a GPU reads them with whole 16-byte loads; the bytes are the
//! file's, moved, never converted, so a row in planes holds exactly what its
//! blocks hold. The CUDA kernels (`ops/quantized/linear/formats.cuh`) read
//! the planes at the offsets [`planes`] lists.

pub use super::block_format::Field;
use super::formats::QuantFormat;

/// The fields of a block of `format` in the order their planes follow one
/// another in a row: the values first (16-byte multiples), then the
/// 4-byte fields, then the 2-byte scale, so every plane is aligned for its
/// loads. Together they cover the block exactly once. Each format's file
/// lists its own (`PLANES`).
pub const fn planes(format: QuantFormat) -> &'static [Field] {
    format.planes()
}

/// Bytes a row of `blocks` blocks takes in planes: the blocks' own bytes,
/// padded to a multiple of 16.
pub const fn planar_row_bytes(format: QuantFormat, blocks: usize) -> usize {
    (blocks * format.block_bytes()).div_ceil(16) * 16
}

/// The number of blocks of a planar row of `row_bytes` bytes, if that is
/// the planar size of some whole number of blocks. Blocks are larger than
/// the padding, so the count is unique.
pub fn planar_blocks(format: QuantFormat, row_bytes: usize) -> Option<usize> {
    let blocks = row_bytes / format.block_bytes();
    (blocks > 0 && planar_row_bytes(format, blocks) == row_bytes).then_some(blocks)
}

/// Rearranges one row of ggml blocks (`native`, whole blocks) into planes
/// in `out` (`planar_row_bytes` long; the padding is zeroed).
///
/// # Panics
/// If `native` is not whole blocks or `out` has the wrong length (callers
/// size both from the same block count).
pub fn to_planes(format: QuantFormat, native: &[u8], out: &mut [u8]) {
    let block_bytes = format.block_bytes();
    assert!(native.len().is_multiple_of(block_bytes), "a row of whole blocks");
    let blocks = native.len() / block_bytes;
    assert_eq!(
        out.len(),
        planar_row_bytes(format, blocks),
        "a planar row's length"
    );
    let mut start = 0;
    for plane in planes(format) {
        for (block, source) in native.chunks_exact(block_bytes).enumerate() {
            let at = start + block * plane.bytes;
            out[at..at + plane.bytes].copy_from_slice(&source[plane.offset..plane.offset + plane.bytes]);
        }
        start += blocks * plane.bytes;
    }
    out[start..].fill(0);
}

/// The inverse of [`to_planes`]: a planar row of `blocks` blocks back into
/// ggml's blocks.
pub fn from_planes(format: QuantFormat, planar: &[u8], blocks: usize, out: &mut [u8]) {
    let block_bytes = format.block_bytes();
    assert_eq!(out.len(), blocks * block_bytes, "a row of whole blocks");
    let mut start = 0;
    for plane in planes(format) {
        for (block, destination) in out.chunks_exact_mut(block_bytes).enumerate() {
            let at = start + block * plane.bytes;
            destination[plane.offset..plane.offset + plane.bytes]
                .copy_from_slice(&planar[at..at + plane.bytes]);
        }
        start += blocks * plane.bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    #[test]
    fn planes_cover_every_block_byte_once_and_align_their_loads() {
        for format in QuantFormat::ALL {
            let mut covered = vec![0u32; format.block_bytes()];
            let mut offset_in_row = 0;
            for plane in planes(format) {
                // A plane starts at blocks * (earlier planes' bytes): aligned
                // for the widest load its field allows (16 bytes at most)
                // whatever the block count.
                let alignment = 1usize << plane.bytes.trailing_zeros().min(4);
                assert_eq!(offset_in_row % alignment, 0, "{format}: a plane is misaligned");
                offset_in_row += plane.bytes;
                for byte in &mut covered[plane.offset..plane.offset + plane.bytes] {
                    *byte += 1;
                }
            }
            assert!(covered.iter().all(|&count| count == 1), "{format}: {covered:?}");
            assert_eq!(
                planes(format)[0].bytes % 16,
                0,
                "{format}: values are read 16 bytes at a time"
            );
        }
    }

    #[test]
    fn planes_round_trip_random_rows_of_any_length() {
        let mut rng = SplitMix64::new(0x51a9e5);
        for format in QuantFormat::ALL {
            for blocks in [1usize, 2, 3, 7, 16] {
                let native: Vec<u8> = (0..blocks * format.block_bytes())
                    .map(|_| rng.next_u64() as u8)
                    .collect();
                let mut planar = vec![0xa5u8; planar_row_bytes(format, blocks)];
                to_planes(format, &native, &mut planar);
                assert_eq!(planar.len() % 16, 0);
                assert_eq!(
                    planar_blocks(format, planar.len()),
                    Some(blocks),
                    "{format} x {blocks}"
                );
                assert!(
                    planar[blocks * format.block_bytes()..].iter().all(|&b| b == 0),
                    "padding zeroed"
                );
                let mut back = vec![0u8; native.len()];
                from_planes(format, &planar, blocks, &mut back);
                assert_eq!(back, native, "{format} x {blocks}");
                // The values of block b start at b * (first plane's bytes).
                let values = planes(format)[0];
                let last = blocks - 1;
                assert_eq!(
                    &planar[last * values.bytes..(last + 1) * values.bytes],
                    &native[last * format.block_bytes() + values.offset..][..values.bytes]
                );
            }
        }
    }
}
