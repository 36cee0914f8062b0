//! What can go wrong when a row is (de)quantized: only lengths, since every
//! byte pattern is a valid block. Returned rather than asserted so that a
//! truncated tensor in a hostile GGUF file is an error, not a panic or a
//! silently short row.

use super::formats::QuantFormat;

/// A row's lengths do not fit its format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// The element count is not a whole number of blocks.
    #[error(
        "{format}: a row of {elements} elements is not a whole number of {}-element blocks",
        .format.block_elements()
    )]
    PartialBlock {
        /// The format asked for.
        format: QuantFormat,
        /// The row's element count.
        elements: usize,
    },

    /// The quantized bytes are not the size the element count needs.
    #[error("{format}: a row of {elements} elements takes {expected} bytes, but {actual} were given")]
    ByteLength {
        /// The format asked for.
        format: QuantFormat,
        /// The row's element count.
        elements: usize,
        /// Bytes those elements take in this format.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
}
