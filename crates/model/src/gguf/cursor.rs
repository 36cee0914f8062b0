//! A bounded position in the bytes of a GGUF header and the checked reads
//! from it: a file of its own, so that the tensor infos' reader uses it
//! without importing the header's reader, which calls it.

use std::path::Path;

use crate::error::{ModelError, Result};

/// A position in the file being read; every read is bounded by its end.
pub(super) struct Cursor<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) position: usize,
    pub(super) path: &'a Path,
    /// String-array elements read that were not UTF-8 (see `Metadata::lossy_strings`).
    pub(super) lossy: Vec<String>,
}

/// What is being read, built only when a message needs it (a vocabulary
/// array reads 150,000 strings that must not each format a description).
pub(super) type What<'w> = &'w dyn Fn() -> String;

impl<'a> Cursor<'a> {
    pub(super) fn error(&self, problem: String) -> ModelError {
        ModelError::Gguf {
            path: self.path.to_path_buf(),
            problem,
        }
    }

    pub(super) fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    pub(super) fn take(&mut self, count: usize, what: What) -> Result<&'a [u8]> {
        if count > self.remaining() {
            return Err(self.error(format!(
                "truncated: {} needs {count} bytes at offset {} but the file ends at {}",
                what(),
                self.position,
                self.bytes.len()
            )));
        }
        let taken = &self.bytes[self.position..self.position + count];
        self.position += count;
        Ok(taken)
    }

    pub(super) fn array<const N: usize>(&mut self, what: What) -> Result<[u8; N]> {
        let taken = self.take(N, what)?;
        Ok(taken.try_into().expect("take gives the bytes asked for"))
    }

    pub(super) fn u32(&mut self, what: What) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    pub(super) fn u64(&mut self, what: What) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A count of items of at least `min_item_bytes` bytes each, refused
    /// when the rest of the file could not hold them.
    pub(super) fn count(&self, count: u64, min_item_bytes: usize, items: &str, what: What) -> Result<usize> {
        let fits = self.remaining() / min_item_bytes;
        match usize::try_from(count) {
            Ok(count) if count <= fits => Ok(count),
            _ => Err(self.error(format!(
                "{}: {count} {items} cannot fit in the {} bytes left at offset {} (each takes at least {min_item_bytes})",
                what(),
                self.remaining(),
                self.position
            ))),
        }
    }

    /// A string whose bytes need not be UTF-8: the text with U+FFFD for
    /// invalid bytes, and the offset of the first invalid byte if any.
    pub(super) fn string_lossy(&mut self, what: What) -> Result<(String, Option<usize>)> {
        let length = self.u64(&|| format!("the length of {}", what()))?;
        let length = match usize::try_from(length) {
            Ok(length) if length <= self.remaining() => length,
            _ => return Err(self.error(format!(
                "{}: a string of {length} bytes at offset {} runs past the end of the file ({} bytes left)",
                what(),
                self.position,
                self.remaining()
            ))),
        };
        let start = self.position;
        let bytes = self.take(length, what)?;
        Ok(match std::str::from_utf8(bytes) {
            Ok(text) => (text.to_string(), None),
            Err(error) => (
                String::from_utf8_lossy(bytes).into_owned(),
                Some(start + error.valid_up_to()),
            ),
        })
    }

    pub(super) fn string(&mut self, what: What) -> Result<String> {
        match self.string_lossy(what)? {
            (text, None) => Ok(text),
            (_, Some(offset)) => Err(self.error(format!(
                "{} is not UTF-8 (invalid byte at offset {offset})",
                what()
            ))),
        }
    }
}
