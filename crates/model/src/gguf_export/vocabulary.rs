//! The vocabulary a written GGUF file carries: the byte-level one of a
//! synthetic model, and `tokenizer.ggml.*` of any vocabulary.

use crate::config::{Architecture, Config};
use crate::error::{ModelError, Result};
use crate::gguf::{Array, GgufWriter, Value};
use crate::tokenizer::GgufVocabulary;

/// The byte-level vocabulary of a synthetic model: the 256 byte symbols,
/// a few merges, Llama 3's three special tokens, then reserved control
/// tokens up to the vocabulary size. Any text encodes (every byte is a
/// token).
pub(super) fn synthetic_vocabulary(config: &Config) -> Result<GgufVocabulary> {
    const MERGES: [&str; 8] = ["Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "Ġt he", "e r"];
    const SPECIAL: [&str; 3] = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"];
    let needed = 256 + MERGES.len() + SPECIAL.len();
    if config.vocab_size < needed {
        return Err(ModelError::InvalidInput(format!(
            "a vocabulary of {} tokens cannot hold the {needed} of a byte-level vocabulary",
            config.vocab_size
        )));
    }
    let mut tokens: Vec<String> = crate::synthetic::byte_level_alphabet()
        .iter()
        .map(|symbol| symbol.to_string())
        .collect();
    tokens.extend(MERGES.iter().map(|merge| merge.replace(' ', "")));
    let mut types = vec![1i32; tokens.len()];
    tokens.extend(SPECIAL.iter().map(|token| token.to_string()));
    types.extend([3; SPECIAL.len()]);
    let reserved = config.vocab_size - tokens.len();
    tokens.extend((0..reserved).map(|index| format!("<|reserved_special_token_{index}|>")));
    types.extend(std::iter::repeat_n(3, reserved));
    let first_special = (256 + MERGES.len()) as u32;
    let llama = !matches!(config.architecture, Architecture::Qwen2 | Architecture::Qwen3);
    Ok(GgufVocabulary {
        model: "gpt2".into(),
        pre: Some(if llama { "llama-bpe" } else { "qwen2" }.into()),
        tokens,
        scores: None,
        token_types: Some(types),
        merges: Some(MERGES.iter().map(|merge| merge.to_string()).collect()),
        bos: Some(first_special),
        eos: Some(first_special + 1),
        unknown: None,
        add_bos: Some(llama),
        add_eos: None,
        add_space_prefix: None,
    })
}

/// `tokenizer.ggml.*` of `vocabulary` (and the end-of-turn id `eot`).
pub(super) fn write_vocabulary(
    writer: &mut GgufWriter,
    vocabulary: &GgufVocabulary,
    eot: Option<u32>,
) -> Result<()> {
    writer.add_metadata("tokenizer.ggml.model", vocabulary.model.as_str())?;
    if let Some(pre) = &vocabulary.pre {
        writer.add_metadata("tokenizer.ggml.pre", pre.as_str())?;
    }
    writer.add_metadata(
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(vocabulary.tokens.clone())),
    )?;
    if let Some(scores) = &vocabulary.scores {
        writer.add_metadata("tokenizer.ggml.scores", Value::Array(Array::F32(scores.clone())))?;
    }
    if let Some(types) = &vocabulary.token_types {
        writer.add_metadata(
            "tokenizer.ggml.token_type",
            Value::Array(Array::I32(types.clone())),
        )?;
    }
    if let Some(merges) = &vocabulary.merges {
        writer.add_metadata(
            "tokenizer.ggml.merges",
            Value::Array(Array::String(merges.clone())),
        )?;
    }
    for (key, id) in [
        ("tokenizer.ggml.bos_token_id", vocabulary.bos),
        ("tokenizer.ggml.eos_token_id", vocabulary.eos),
        ("tokenizer.ggml.eot_token_id", eot),
        ("tokenizer.ggml.unknown_token_id", vocabulary.unknown),
    ] {
        if let Some(id) = id {
            writer.add_metadata(key, id)?;
        }
    }
    for (key, flag) in [
        ("tokenizer.ggml.add_bos_token", vocabulary.add_bos),
        ("tokenizer.ggml.add_eos_token", vocabulary.add_eos),
    ] {
        if let Some(flag) = flag {
            writer.add_metadata(key, flag)?;
        }
    }
    Ok(())
}
