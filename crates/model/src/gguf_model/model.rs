//! The opened GGUF model's parts: a file of their own, so that placing its
//! weights and finding its non-finite ones take the model without
//! importing `mod.rs`, which opens it with their help.

use crate::config::Config;
use crate::gguf::GgufFile;
use crate::tokenizer::GgufVocabulary;

/// A GGUF model, opened and checked, before its weights are placed.
pub struct GgufModel {
    /// The file (every part of a split one).
    pub file: GgufFile,
    /// The configuration its metadata describes.
    pub config: Config,
    /// Its vocabulary, when it has one.
    pub vocabulary: Option<GgufVocabulary>,
    /// Why its vocabulary could not be read (a token that is not UTF-8):
    /// the weights run without it (`--token-ids`), and
    /// [`tokenizer`](Self::tokenizer) says this where text is needed.
    pub vocabulary_problem: Option<String>,
    /// `tokenizer.chat_template`, when present.
    pub chat_template: Option<String>,
}
