//! A model's tokenizer through the `tokenizers` crate (pure-Rust regex
//! backend): the optional `tokenizer.json` of a model directory, or the
//! vocabulary a GGUF file carries in its metadata (`gguf.rs`).

pub(crate) mod gguf;

pub use gguf::GgufVocabulary;

use std::path::Path;

use crate::error::{ModelError, Result};

/// The largest tokenizer.json read (Llama 3's is 9 MB, Gemma's 33 MB).
const MAX_TOKENIZER_BYTES: u64 = 256 << 20;

/// A Hugging Face tokenizer.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl Tokenizer {
    /// `directory/tokenizer.json`, or `None` when there is none.
    pub fn from_directory(directory: &Path) -> Result<Option<Tokenizer>> {
        let path = directory.join("tokenizer.json");
        if std::fs::symlink_metadata(&path).is_err() {
            return Ok(None);
        }
        let bytes = crate::files::read_regular_file(&path, MAX_TOKENIZER_BYTES)?;
        Self::from_bytes(&bytes, &path).map(Some)
    }

    /// A tokenizer from tokenizer.json bytes (`path` names it in errors).
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Tokenizer> {
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|error| {
            ModelError::Tokenizer(format!(
                "{}: {}",
                path.display(),
                error.to_string().replace('\n', " ")
            ))
        })?;
        Ok(Tokenizer { inner })
    }

    /// The tokenizer a GGUF file's vocabulary describes (`source` names the
    /// file in errors).
    pub fn from_gguf(vocabulary: &GgufVocabulary, source: &str) -> Result<Tokenizer> {
        let json = vocabulary.tokenizer_json(source)?;
        let bytes = serde_json::to_vec(&json).expect("JSON values serialize");
        Self::from_bytes(&bytes, Path::new(source))
    }

    /// Token ids of `text` (with the tokenizer's special tokens, e.g. BOS).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_with(text, true)
    }

    /// Token ids of `text` as it is: no BOS or other added tokens, for text
    /// that already holds them (a rendered chat template). Special tokens
    /// written in the text still become their single ids.
    pub fn encode_without_special_tokens(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_with(text, false)
    }

    fn encode_with(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode(text, add_special_tokens)
            .map_err(|error| ModelError::Tokenizer(format!("encoding the prompt: {error}")))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Text of `ids` (special tokens skipped).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, true)
            .map_err(|error| ModelError::Tokenizer(format!("decoding: {error}")))
    }

    /// The id of `token` (a vocabulary entry or an added token), if any.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}
