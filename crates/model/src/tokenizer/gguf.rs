//! The tokenizer a GGUF file describes in its metadata (llama.cpp's
//! `tokenizer.ggml.*` keys), built as the `tokenizer.json` transformers
//! would make of it (`integrations/gguf/gguf_tokenizer_mapping.py`) and
//! handed to the `tokenizers` crate, so GGUF and Hugging Face models share
//! one tokenizer implementation. Two vocabulary kinds: `gpt2` (byte-level
//! BPE with merges, split first by the pre-tokenizer `tokenizer.ggml.pre`
//! names) and `llama` (SentencePiece: `▁` for spaces, a space before each
//! stretch of text as llama.cpp adds it, merges by score, `<0xNN>` byte
//! fallback). Anything else is refused by name.
//!
//! What llama.cpp loads loads: a token that is not UTF-8 is read with U+FFFD
//! (`Metadata::lossy_strings` says which), merges naming or making a token
//! the vocabulary lacks are left out (`GgufVocabulary::unusable_merges`),
//! and a vocabulary that cannot tokenize at all fails only where text is
//! encoded or decoded, so `--token-ids`, `bench` and `kl` still run such a
//! file.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::error::{ModelError, Result};

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
const TOKEN_TYPE_CONTROL: i32 = 3;
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// The split of Llama 3's tokenizer (and the `llama-bpe` family llama.cpp
/// groups with it), as its tokenizer.json writes it.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's split: Llama 3's with single digits.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// llama.cpp's `default` BPE pre-tokenizer: four expressions, each
/// splitting the pieces the one before left (`unicode_regex_split`).
const DEFAULT_SPLITS: [&str; 4] = [
    r"[\p{P}\$\+<=>\^~\|]+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    r"\p{N}+",
    r"[0-9][0-9][0-9]",
];

/// The pre-tokenizers implemented, by `tokenizer.ggml.pre`: the splits and
/// whether a word found whole in the vocabulary skips the merges (llama.cpp's
/// `ignore_merges`, Llama 3's tokenizer.json's too).
fn byte_level_splits(pre: &str) -> Option<(Vec<&'static str>, bool)> {
    match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "smaug-bpe" => Some((vec![LLAMA3_SPLIT], true)),
        "qwen2" | "deepseek-r1-qwen" => Some((vec![QWEN2_SPLIT], false)),
        "default" => Some((DEFAULT_SPLITS.to_vec(), false)),
        _ => None,
    }
}

/// The pre-tokenizer names [`byte_level_splits`] knows, for errors.
const PRE_TOKENIZERS: &str = "llama-bpe (llama3, llama-v3, smaug-bpe), qwen2 (deepseek-r1-qwen), default";

/// What a GGUF file says of its tokenizer: the `tokenizer.ggml.*` values,
/// read and type-checked by the caller.
#[derive(Clone, Debug, Default)]
pub struct GgufVocabulary {
    /// `tokenizer.ggml.model`: `gpt2` or `llama`.
    pub model: String,
    /// `tokenizer.ggml.pre`: the byte-level pre-tokenizer (`gpt2` only).
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`, by id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores`, by id (SentencePiece's merge priorities).
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.token_type`, by id.
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.merges`: `"left right"` pairs, best first.
    pub merges: Option<Vec<String>>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unknown: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`.
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix` (SentencePiece).
    pub add_space_prefix: Option<bool>,
}

impl GgufVocabulary {
    /// The `tokenizer.json` of this vocabulary; `source` names the file in
    /// errors.
    pub fn tokenizer_json(&self, source: &str) -> Result<Value> {
        let refuse = |problem: String| ModelError::Tokenizer(format!("{source}: {problem}"));
        if self.tokens.is_empty() {
            return Err(refuse("tokenizer.ggml.tokens is empty".into()));
        }
        let count = self.tokens.len();
        for (key, list) in [
            ("tokenizer.ggml.scores", self.scores.as_ref().map(Vec::len)),
            (
                "tokenizer.ggml.token_type",
                self.token_types.as_ref().map(Vec::len),
            ),
        ] {
            if let Some(length) = list
                && length != count
            {
                return Err(refuse(format!("{key} has {length} entries for {count} tokens")));
            }
        }
        for (key, id) in [
            ("tokenizer.ggml.bos_token_id", self.bos),
            ("tokenizer.ggml.eos_token_id", self.eos),
            ("tokenizer.ggml.unknown_token_id", self.unknown),
        ] {
            if let Some(id) = id
                && id as usize >= count
            {
                return Err(refuse(format!("{key} is {id}, past the {count} tokens")));
            }
        }
        let (model, normalizer, pre_tokenizer, decoder, add_bos) = match self.model.as_str() {
            "gpt2" => {
                let pre = self.pre.as_deref().unwrap_or("default");
                let Some((splits, ignore_merges)) = byte_level_splits(pre) else {
                    return Err(refuse(format!(
                        "pre-tokenizer `{pre}` (tokenizer.ggml.pre) is not implemented (implemented: {PRE_TOKENIZERS})"
                    )));
                };
                let Some(merges) = &self.merges else {
                    return Err(refuse("a gpt2 vocabulary without tokenizer.ggml.merges".into()));
                };
                let unusable: std::collections::HashSet<&str> = self.unusable_merges().into_iter().collect();
                let merges = merges
                    .iter()
                    .filter(|merge| !unusable.contains(merge.as_str()))
                    .map(|merge| match merge.split_once(' ') {
                        Some((left, right)) if !right.contains(' ') => Ok(json!([left, right])),
                        _ => Err(refuse(format!(
                            "merge `{merge}` is not two tokens separated by one space"
                        ))),
                    })
                    .collect::<Result<Vec<_>>>()?;
                let mut pieces: Vec<Value> = splits
                    .iter()
                    .map(|pattern| json!({"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false}))
                    .collect();
                pieces.push(json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}));
                let model = json!({
                    "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                    "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                    "ignore_merges": ignore_merges, "vocab": self.vocabulary(), "merges": merges,
                });
                let decoder = json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true});
                // llama.cpp adds BOS for Llama 3's pre-tokenizer unless the file says otherwise.
                let add_bos = self.add_bos.unwrap_or(ignore_merges);
                (
                    model,
                    Value::Null,
                    json!({"type": "Sequence", "pretokenizers": pieces}),
                    decoder,
                    add_bos,
                )
            }
            "llama" => {
                let merges = match &self.merges {
                    Some(merges) => merges
                        .iter()
                        .map(|merge| match merge.split_once(' ') {
                            Some((left, right)) => Ok(json!([left, right])),
                            None => Err(refuse(format!(
                                "merge `{merge}` is not two tokens separated by a space"
                            ))),
                        })
                        .collect::<Result<Vec<_>>>()?,
                    None => {
                        let Some(scores) = &self.scores else {
                            return Err(refuse(
                                "a llama (SentencePiece) vocabulary needs tokenizer.ggml.scores or tokenizer.ggml.merges"
                                    .into(),
                            ));
                        };
                        merges_from_scores(&self.tokens, scores)
                            .into_iter()
                            .map(|(left, right)| json!([left, right]))
                            .collect()
                    }
                };
                let unknown = self.unknown.map(|id| self.tokens[id as usize].clone());
                let model = json!({
                    "type": "BPE", "dropout": null, "unk_token": unknown, "continuing_subword_prefix": null,
                    "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true,
                    "ignore_merges": false, "vocab": self.vocabulary(), "merges": merges,
                });
                let add_space_prefix = self.add_space_prefix.unwrap_or(true);
                // llama.cpp prefixes a space to every stretch of text that
                // starts the input or follows a special token, then writes
                // every space as `▁`. A normalizer runs on each stretch
                // between added tokens, so it does exactly that (Metaspace
                // would skip the prefix where the text already starts with
                // a space).
                let escape = json!({"type": "Replace", "pattern": {"String": " "}, "content": "▁"});
                let normalizer = if add_space_prefix {
                    json!({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, escape]})
                } else {
                    escape
                };
                let mut steps = vec![
                    json!({"type": "Replace", "pattern": {"String": "▁"}, "content": " "}),
                    json!({"type": "ByteFallback"}),
                    json!({"type": "Fuse"}),
                ];
                if add_space_prefix {
                    steps.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
                }
                // llama.cpp adds BOS to a SentencePiece vocabulary unless told not to.
                let add_bos = self.add_bos.unwrap_or(true);
                (
                    model,
                    normalizer,
                    Value::Null,
                    json!({"type": "Sequence", "decoders": steps}),
                    add_bos,
                )
            }
            other => {
                return Err(refuse(format!(
                    "tokenizer model `{other}` (tokenizer.ggml.model) is not implemented (implemented: gpt2, llama)"
                )));
            }
        };
        let add_eos = self.add_eos.unwrap_or(false);
        let post_processor = self.post_processor(add_bos, add_eos, &refuse)?;
        Ok(json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": self.added_tokens(),
            "normalizer": normalizer,
            "pre_tokenizer": pre_tokenizer,
            "post_processor": post_processor,
            "decoder": decoder,
            "model": model,
        }))
    }

    /// Token → id. A token listed twice keeps its last id, as a Python
    /// dict built from the list would.
    /// The merges no text can use: naming a token the vocabulary does not
    /// hold, or making one it does not. llama.cpp never applies them;
    /// the tokenizer leaves them out (its caller may say so).
    pub fn unusable_merges(&self) -> Vec<&str> {
        let Some(merges) = &self.merges else {
            return Vec::new();
        };
        let known: std::collections::HashSet<&str> = self.tokens.iter().map(String::as_str).collect();
        merges
            .iter()
            .filter(|merge| match merge.split_once(' ') {
                Some((left, right)) => {
                    !known.contains(left)
                        || !known.contains(right)
                        || !known.contains(format!("{left}{right}").as_str())
                }
                None => false,
            })
            .map(String::as_str)
            .collect()
    }

    fn vocabulary(&self) -> serde_json::Map<String, Value> {
        self.tokens
            .iter()
            .enumerate()
            .map(|(id, token)| (token.clone(), json!(id)))
            .collect()
    }

    /// Control tokens as special tokens and user-defined ones as plain added
    /// tokens: llama.cpp matches both whole in the text.
    fn added_tokens(&self) -> Vec<Value> {
        let Some(types) = &self.token_types else {
            return Vec::new();
        };
        let byte_level = self.model == "gpt2";
        let alphabet: std::collections::HashSet<char> =
            crate::synthetic::byte_level_alphabet().into_iter().collect();
        self.tokens
            .iter()
            .zip(types)
            .enumerate()
            .filter(|(_, (token, kind))| {
                match **kind {
                    // A control token spelled outside the byte alphabet is a
                    // mislabel in a byte-level vocabulary (transformers skips it too).
                    TOKEN_TYPE_CONTROL => !byte_level || token.chars().all(|c| alphabet.contains(&c)),
                    TOKEN_TYPE_USER_DEFINED => true,
                    _ => false,
                }
            })
            .map(|(id, (token, kind))| {
                json!({
                    "id": id, "content": token, "single_word": false, "lstrip": false, "rstrip": false,
                    "normalized": false, "special": *kind == TOKEN_TYPE_CONTROL,
                })
            })
            .collect()
    }

    /// BOS before and EOS after the text, as the flags say.
    fn post_processor(
        &self,
        add_bos: bool,
        add_eos: bool,
        refuse: &dyn Fn(String) -> ModelError,
    ) -> Result<Value> {
        let mut single = Vec::new();
        let mut special_tokens = serde_json::Map::new();
        let mut special = |id: Option<u32>, key: &str| -> Result<Value> {
            let Some(id) = id else {
                return Err(refuse(format!("the file asks to add a token but has no {key}")));
            };
            let token = self.tokens[id as usize].clone();
            special_tokens.insert(
                token.clone(),
                json!({"id": token, "ids": [id], "tokens": [token]}),
            );
            Ok(json!({"SpecialToken": {"id": token, "type_id": 0}}))
        };
        if add_bos {
            single.push(special(self.bos, "tokenizer.ggml.bos_token_id")?);
        }
        single.push(json!({"Sequence": {"id": "A", "type_id": 0}}));
        if add_eos {
            single.push(special(self.eos, "tokenizer.ggml.eos_token_id")?);
        }
        if !add_bos && !add_eos {
            return Ok(Value::Null);
        }
        let mut pair = single.clone();
        pair.push(json!({"Sequence": {"id": "B", "type_id": 1}}));
        Ok(
            json!({"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": special_tokens}),
        )
    }
}

/// The merges a SentencePiece vocabulary implies (transformers'
/// `generate_merges` with scores): every split of a token into two
/// tokens of the vocabulary, the merge's priority its token's score,
/// best first; ties by the left and then the right piece's length, longer
/// first, as transformers' stable reverse sort leaves them.
fn merges_from_scores(tokens: &[String], scores: &[f32]) -> Vec<(String, String)> {
    let ids: HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .map(|(id, token)| (token.as_str(), id))
        .collect();
    // A Python dict from the token list keeps each token's first position
    // and its last score.
    let mut score_of: HashMap<&str, f32> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for (token, score) in tokens.iter().zip(scores) {
        if score_of.insert(token.as_str(), *score).is_none() {
            order.push(token);
        }
    }
    let mut merges: Vec<(&str, &str, f32)> = Vec::new();
    for token in order {
        let mut local: Vec<(&str, &str, f32)> = token
            .char_indices()
            .skip(1)
            .map(|(split, _)| (&token[..split], &token[split..]))
            .filter(|(left, right)| ids.contains_key(left) && ids.contains_key(right))
            .map(|(left, right)| (left, right, score_of[token]))
            .collect();
        local.sort_by_key(|(left, right, _)| (ids[left], ids[right]));
        merges.extend(local);
    }
    // Python's `sorted(..., key=(score, len(left), len(right)), reverse=True)`
    // is stable: equal keys keep their order.
    merges.sort_by(|a, b| {
        let key = |m: &(&str, &str, f32)| (m.2, m.0.chars().count(), m.1.chars().count());
        let (ka, kb) = (key(a), key(b));
        kb.0.total_cmp(&ka.0).then(kb.1.cmp(&ka.1)).then(kb.2.cmp(&ka.2))
    });
    merges
        .into_iter()
        .map(|(left, right, _)| (left.to_string(), right.to_string()))
        .collect()
}

/// The `tokenizer.ggml.*` vocabulary of `directory/tokenizer.json`, as
/// llama.cpp's converter writes it, where the file is a byte-level BPE
/// vocabulary whose pre-tokenizer GGUF names (Llama 3's or Qwen2's split).
/// `Ok(Err(reason))` when it cannot be carried over.
pub(crate) fn vocabulary_of_tokenizer_json(
    directory: &std::path::Path,
) -> Result<std::result::Result<GgufVocabulary, String>> {
    let path = directory.join("tokenizer.json");
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(Err(format!("{} has no tokenizer.json", directory.display())));
    }
    let bytes = crate::files::read_regular_file(&path, 256 << 20)?;
    let json: Value = serde_json::from_slice(&bytes)
        .map_err(|error| ModelError::Tokenizer(format!("{}: {error}", path.display())))?;
    let model = &json["model"];
    if model["type"] != "BPE" {
        return Ok(Err(format!(
            "{}: only byte-level BPE vocabularies are converted",
            path.display()
        )));
    }
    let text = json["pre_tokenizer"].to_string();
    let pre = if text.contains(&serde_json::to_string(LLAMA3_SPLIT).expect("a string")) {
        "llama-bpe"
    } else if text.contains(&serde_json::to_string(QWEN2_SPLIT).expect("a string")) {
        "qwen2"
    } else {
        return Ok(Err(format!(
            "{}: its pre-tokenizer is neither Llama 3's nor Qwen2's",
            path.display()
        )));
    };
    let mut tokens: Vec<Option<(String, i32)>> = Vec::new();
    let mut place = |id: u64, token: &str, kind: i32| {
        let id = id as usize;
        if id >= tokens.len() {
            tokens.resize(id + 1, None);
        }
        tokens[id] = Some((token.to_string(), kind));
    };
    for (token, id) in model["vocab"].as_object().into_iter().flatten() {
        if let Some(id) = id.as_u64() {
            place(id, token, 1);
        }
    }
    for added in json["added_tokens"].as_array().into_iter().flatten() {
        if let (Some(id), Some(content)) = (added["id"].as_u64(), added["content"].as_str()) {
            place(
                id,
                content,
                if added["special"] == true {
                    TOKEN_TYPE_CONTROL
                } else {
                    TOKEN_TYPE_USER_DEFINED
                },
            );
        }
    }
    let (mut names, mut types) = (Vec::with_capacity(tokens.len()), Vec::with_capacity(tokens.len()));
    for (id, token) in tokens.into_iter().enumerate() {
        // Ids no token uses are padding, as the converter writes them.
        let (name, kind) = token.unwrap_or_else(|| (format!("[PAD{id}]"), 5));
        names.push(name);
        types.push(kind);
    }
    let merges = model["merges"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|merge| match merge {
            Value::String(text) => Some(text.clone()),
            Value::Array(pair) => Some(format!("{} {}", pair.first()?.as_str()?, pair.get(1)?.as_str()?)),
            _ => None,
        })
        .collect();
    let bos = json["post_processor"]["single"]
        .as_array()
        .and_then(|single| single.first())
        .and_then(|first| first["SpecialToken"]["id"].as_str())
        .and_then(|token| names.iter().position(|name| name == token))
        .map(|id| id as u32);
    Ok(Ok(GgufVocabulary {
        model: "gpt2".into(),
        pre: Some(pre.into()),
        tokens: names,
        scores: None,
        token_types: Some(types),
        merges: Some(merges),
        bos,
        eos: None,
        unknown: None,
        add_bos: Some(bos.is_some()),
        add_eos: None,
        add_space_prefix: None,
    }))
}
