//! The optional `tokenizer.json` of a model directory, through the
//! `tokenizers` crate (pure-Rust regex backend).

use std::path::Path;

use crate::error::{ModelError, Result};

/// A Hugging Face tokenizer.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl Tokenizer {
    /// `directory/tokenizer.json`, or `None` when there is none.
    pub fn from_directory(directory: &Path) -> Result<Option<Tokenizer>> {
        let path = directory.join("tokenizer.json");
        if !path.is_file() {
            return Ok(None);
        }
        let inner = tokenizers::Tokenizer::from_file(&path)
            .map_err(|error| ModelError::Tokenizer(format!("{}: {error}", path.display())))?;
        Ok(Some(Tokenizer { inner }))
    }

    /// Token ids of `text` (with the tokenizer's special tokens, e.g. BOS).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode(text, true)
            .map_err(|error| ModelError::Tokenizer(format!("encoding the prompt: {error}")))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Text of `ids` (special tokens skipped).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, true)
            .map_err(|error| ModelError::Tokenizer(format!("decoding: {error}")))
    }
}
