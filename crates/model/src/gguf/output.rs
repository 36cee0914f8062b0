//! Where a GGUF file being written goes (the temporary file, counting its
//! bytes for the padding) and the tensors declared for it: a file of their
//! own, so that the header's encoder uses them without importing the
//! writer, which calls it.

use std::fs::File;
use std::io::{BufWriter, Write};

use super::types::TensorType;

/// A tensor declared for writing.
#[derive(Clone, Debug)]
pub(super) struct PlannedTensor {
    pub(super) name: String,
    pub(super) dims: Vec<u64>,
    pub(super) tensor_type: TensorType,
    pub(super) byte_len: u64,
}

/// The temporary file, counting what has been written (for the padding).
#[derive(Debug)]
pub(super) struct Sink {
    pub(super) out: BufWriter<File>,
    pub(super) written: u64,
}

impl Sink {
    pub(super) fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Zeros up to the next multiple of `alignment`.
    pub(super) fn pad(&mut self, alignment: u64) -> std::io::Result<()> {
        let padding = self.written.next_multiple_of(alignment) - self.written;
        const ZEROS: [u8; 64] = [0; 64];
        let mut left = padding;
        while left > 0 {
            let chunk = left.min(ZEROS.len() as u64) as usize;
            self.put(&ZEROS[..chunk])?;
            left -= chunk as u64;
        }
        Ok(())
    }
}
