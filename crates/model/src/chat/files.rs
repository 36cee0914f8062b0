//! The JSON files beside a chat template: `tokenizer_config.json` (the
//! template in older layouts, the special tokens) and
//! `generation_config.json` (the stop tokens), read with bounded sizes and
//! errors that name the file and the field.

use std::path::{Path, PathBuf};

use crate::error::{ModelError, Result};

/// The generation defaults, with the stop tokens.
const GENERATION_CONFIG_FILE: &str = "generation_config.json";

/// The largest template source, tokenizer_config.json or
/// generation_config.json read (real ones are kilobytes).
pub(super) const MAX_TEMPLATE_FILE_BYTES: u64 = 16 << 20;

/// `tokenizer_config.json`'s `chat_template`: a string, a list of named
/// templates (the `default` one), or absent.
pub(super) fn template_in_config(config: &serde_json::Value) -> std::result::Result<Option<String>, String> {
    match config.get("chat_template") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(template)) => Ok(Some(template.clone())),
        Some(serde_json::Value::Array(templates)) => {
            let mut names = Vec::new();
            for entry in templates {
                let name = entry.get("name").and_then(serde_json::Value::as_str);
                let template = entry.get("template").and_then(serde_json::Value::as_str);
                match (name, template) {
                    (Some("default"), Some(template)) => return Ok(Some(template.to_string())),
                    (Some(name), Some(_)) => names.push(name.to_string()),
                    _ => {
                        return Err(
                            "chat_template: a list entry is not {\"name\": string, \"template\": string}"
                                .to_string(),
                        );
                    }
                }
            }
            Err(format!(
                "chat_template: no template named `default` (there are: {})",
                names.join(", ")
            ))
        }
        Some(other) => Err(format!(
            "chat_template: expected a string or a list of named templates, found {}",
            json_kind(other)
        )),
    }
}

/// A special token of `tokenizer_config.json`: a string, or an object with
/// `content` (an `AddedToken`), or absent.
pub(super) fn special_token(
    config: &serde_json::Value,
    field: &str,
) -> std::result::Result<Option<String>, String> {
    match config.get(field) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(token)) => Ok(Some(token.clone())),
        Some(object @ serde_json::Value::Object(_)) => match object.get("content") {
            Some(serde_json::Value::String(token)) => Ok(Some(token.clone())),
            _ => Err(format!("{field}: an object without a string `content`")),
        },
        Some(other) => Err(format!(
            "{field}: expected a string or an object with `content`, found {}",
            json_kind(other)
        )),
    }
}

/// `path` parsed as JSON, or `None` when the file does not exist.
pub(super) fn read_json(
    path: &Path,
    invalid: impl Fn(PathBuf, String) -> ModelError,
) -> Result<Option<serde_json::Value>> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    // A regular file of bounded size: a FIFO would block the read.
    let bytes = crate::files::read_regular_file(path, MAX_TEMPLATE_FILE_BYTES)?;
    let value: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|error| invalid(path.to_path_buf(), format!("not valid JSON: {error}")))?;
    if !value.is_object() {
        return Err(invalid(
            path.to_path_buf(),
            format!("expected a JSON object, found {}", json_kind(&value)),
        ));
    }
    Ok(Some(value))
}

/// How a JSON value is named in errors.
fn json_kind(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => "null".to_string(),
        serde_json::Value::Bool(value) => format!("the boolean {value}"),
        serde_json::Value::Number(value) => format!("the number {value}"),
        serde_json::Value::String(value) => {
            format!("the string {:?}", value.chars().take(40).collect::<String>())
        }
        serde_json::Value::Array(_) => "a list".to_string(),
        serde_json::Value::Object(_) => "an object".to_string(),
    }
}

/// `generation_config.json`: the generation defaults a model ships, of
/// which the engine needs the stop tokens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GenerationConfig {
    /// `eos_token_id` (one id or a list): generation stops at any of them.
    /// Empty when the file or the field is absent.
    pub eos_token_ids: Vec<u32>,
    /// `bos_token_id`, if given.
    pub bos_token_id: Option<u32>,
}

impl GenerationConfig {
    /// `directory/generation_config.json`, or the empty config when there is
    /// none. Token ids must be integers in `0..2^32`; anything else is an
    /// error naming the file and the field.
    pub fn from_directory(directory: &Path) -> Result<GenerationConfig> {
        let path = directory.join(GENERATION_CONFIG_FILE);
        let invalid = |path: PathBuf, problem: String| ModelError::GenerationConfig { path, problem };
        let Some(config) = read_json(&path, invalid)? else {
            return Ok(GenerationConfig::default());
        };
        let field_error = |problem: String| ModelError::GenerationConfig {
            path: path.clone(),
            problem,
        };
        let eos_token_ids = match config.get("eos_token_id") {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Array(ids)) => ids
                .iter()
                .map(|id| token_id("eos_token_id", id))
                .collect::<std::result::Result<_, _>>()
                .map_err(field_error)?,
            Some(id) => vec![token_id("eos_token_id", id).map_err(field_error)?],
        };
        let bos_token_id = match config.get("bos_token_id") {
            None | Some(serde_json::Value::Null) => None,
            Some(id) => Some(token_id("bos_token_id", id).map_err(field_error)?),
        };
        Ok(GenerationConfig {
            eos_token_ids,
            bos_token_id,
        })
    }
}

/// A token id field's value, which must be an integer in `0..2^32`.
fn token_id(field: &str, value: &serde_json::Value) -> std::result::Result<u32, String> {
    value
        .as_u64()
        .and_then(|id| u32::try_from(id).ok())
        .ok_or_else(|| {
            format!(
                "{field}: {} is not a token id (expected an integer from 0 to {})",
                json_kind(value),
                u32::MAX
            )
        })
}
