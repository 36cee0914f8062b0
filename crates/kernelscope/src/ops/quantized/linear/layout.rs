//! How a device's quantized kernels expect a matrix's rows of blocks (ggml's
//! blocks on the CPU, planes on CUDA), and the check of a weight's shape
//! against its format in that layout.

use crate::error::{Error, Result};
use crate::ops::{dimensions, expect};
use crate::quant::QuantFormat;
use crate::quant::planes::{planar_blocks, planar_row_bytes, to_planes};
use crate::runtime::{Buffer, DType, Device};

/// How a device's quantized kernels expect a matrix's rows of blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockLayout {
    /// ggml's blocks one after another, as the file holds them (the CPU).
    Blocks,
    /// Each field of a row's blocks together, rows padded to 16 bytes
    /// ([`crate::quant::planes`]: CUDA).
    Planes,
}

impl BlockLayout {
    /// The layout `device`'s quantized kernels read.
    pub fn of(device: &Device) -> BlockLayout {
        if device.backend() == "cpu" {
            BlockLayout::Blocks
        } else {
            BlockLayout::Planes
        }
    }

    /// Bytes one row of `blocks` blocks of `format` takes.
    pub fn row_bytes(self, format: QuantFormat, blocks: usize) -> usize {
        match self {
            BlockLayout::Blocks => blocks * format.block_bytes(),
            BlockLayout::Planes => planar_row_bytes(format, blocks),
        }
    }

    /// The blocks of a row of `row_bytes` bytes, if that is whole blocks in
    /// this layout.
    pub fn blocks(self, format: QuantFormat, row_bytes: usize) -> Option<usize> {
        match self {
            BlockLayout::Blocks => (row_bytes > 0 && row_bytes.is_multiple_of(format.block_bytes()))
                .then(|| row_bytes / format.block_bytes()),
            BlockLayout::Planes => planar_blocks(format, row_bytes),
        }
    }

    /// `rows` rows of ggml blocks (`row(i)` gives row i, all of one length)
    /// in this layout, one after another.
    pub fn arrange<'a>(
        self,
        format: QuantFormat,
        rows: usize,
        row: impl Fn(usize) -> &'a [u8] + Sync,
    ) -> Vec<u8> {
        use rayon::prelude::*;
        let blocks = if rows == 0 {
            0
        } else {
            row(0).len() / format.block_bytes()
        };
        let row_bytes = self.row_bytes(format, blocks);
        let mut out = vec![0u8; rows * row_bytes];
        if row_bytes == 0 {
            return out;
        }
        out.par_chunks_mut(row_bytes)
            .enumerate()
            .for_each(|(index, destination)| match self {
                BlockLayout::Blocks => destination.copy_from_slice(row(index)),
                BlockLayout::Planes => to_planes(format, row(index), destination),
            });
        out
    }
}

/// The blocks and elements of a weight `[n, row_bytes]` of `format` in
/// `layout`, or an error naming `op`'s weight.
pub(crate) fn weight_blocks(
    op: &str,
    format: QuantFormat,
    layout: BlockLayout,
    weight: &Buffer,
) -> Result<(usize, usize, usize)> {
    let [n, row_bytes] = dimensions(op, "weight", weight)?;
    expect(op, "weight", weight, DType::U8, &[n, row_bytes])?;
    let blocks = layout
        .blocks(format, row_bytes)
        .ok_or_else(|| Error::ShapeMismatch {
            context: format!(
                "{op} weight: a {format} row of {row_bytes} bytes is not whole {}-byte blocks{}",
                format.block_bytes(),
                if layout == BlockLayout::Planes {
                    " in planes padded to 16 bytes"
                } else {
                    ""
                }
            ),
            expected: vec![
                n,
                layout.row_bytes(format, (row_bytes / format.block_bytes()).max(1)),
            ],
            found: vec![n, row_bytes],
        })?;
    Ok((n, blocks, blocks * format.block_elements()))
}
