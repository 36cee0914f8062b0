//! Chat: the checkpoint's own chat template (Jinja, as transformers'
//! `apply_chat_template` renders it), the end-of-sequence ids of
//! `generation_config.json`, and a streaming decoder that turns generated ids
//! into text as they come. Templates are untrusted input: rendering is
//! bounded (fuel, recursion, output size) and every failure is one line
//! naming the file.

use std::path::{Path, PathBuf};

use minijinja::{Environment, ErrorKind, Value};
use serde::Serialize;

use crate::error::{ModelError, Result};
use crate::tokenizer::Tokenizer;

/// The largest template source or tokenizer_config.json read.
const MAX_TEMPLATE_FILE_BYTES: u64 = 16 << 20;

/// The most instructions a render may take: real templates take a few
/// thousand; a hostile one stops here instead of hanging.
const TEMPLATE_FUEL: u64 = 2_000_000;

/// The longest rendered prompt.
const MAX_RENDERED_BYTES: usize = 4 << 20;

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl ChatMessage {
    /// A message from `role` with `content`.
    pub fn new(role: &str, content: &str) -> Self {
        ChatMessage {
            role: role.to_string(),
            content: content.to_string(),
        }
    }
}

/// A checkpoint's chat template with the special tokens it refers to.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    source: String,
    /// The file it came from, for errors.
    path: PathBuf,
    bos_token: Option<String>,
    eos_token: Option<String>,
    unk_token: Option<String>,
    pad_token: Option<String>,
}

/// A special token in tokenizer_config.json: a string, or an object whose
/// `content` is the string (transformers' AddedToken).
fn special_token(config: &serde_json::Value, name: &str) -> Option<String> {
    match config.get(name)? {
        serde_json::Value::String(text) => Some(text.clone()),
        serde_json::Value::Object(token) => token.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

fn template_error(path: &Path, problem: String) -> ModelError {
    ModelError::ChatTemplate {
        path: path.to_path_buf(),
        problem: problem.replace('\n', " "),
    }
}

impl ChatTemplate {
    /// The template of the model in `directory`: `chat_template.jinja` when
    /// present (newer transformers save it there), else `chat_template` of
    /// `tokenizer_config.json` (a string, or a list of named templates of
    /// which "default" is used). `None` when the model has none.
    pub fn from_directory(directory: &Path) -> Result<Option<ChatTemplate>> {
        let config_path = directory.join("tokenizer_config.json");
        let config: serde_json::Value = if config_path.exists() {
            let bytes = crate::files::read_regular_file(&config_path, MAX_TEMPLATE_FILE_BYTES)?;
            serde_json::from_slice(&bytes).map_err(|error| {
                template_error(&config_path, format!("malformed tokenizer_config.json: {error}"))
            })?
        } else {
            serde_json::Value::Null
        };
        let jinja_path = directory.join("chat_template.jinja");
        let (source, path) = if jinja_path.exists() {
            let bytes = crate::files::read_regular_file(&jinja_path, MAX_TEMPLATE_FILE_BYTES)?;
            let source = String::from_utf8(bytes)
                .map_err(|_| template_error(&jinja_path, "chat_template.jinja is not UTF-8 text".into()))?;
            (source, jinja_path)
        } else {
            match config.get("chat_template") {
                None | Some(serde_json::Value::Null) => return Ok(None),
                Some(serde_json::Value::String(source)) => (source.clone(), config_path.clone()),
                Some(serde_json::Value::Array(templates)) => {
                    let default = templates
                        .iter()
                        .find(|entry| entry.get("name").and_then(|name| name.as_str()) == Some("default"));
                    match default
                        .and_then(|entry| entry.get("template"))
                        .and_then(|t| t.as_str())
                    {
                        Some(source) => (source.to_string(), config_path.clone()),
                        None => {
                            return Err(template_error(
                                &config_path,
                                "`chat_template` lists templates but none named \"default\" with a string `template`"
                                    .into(),
                            ));
                        }
                    }
                }
                Some(other) => {
                    return Err(template_error(
                        &config_path,
                        format!(
                            "`chat_template` must be a string or a list of named templates, found {}",
                            other.to_string().chars().take(40).collect::<String>()
                        ),
                    ));
                }
            }
        };
        Ok(Some(ChatTemplate {
            source,
            path,
            bos_token: special_token(&config, "bos_token"),
            eos_token: special_token(&config, "eos_token"),
            unk_token: special_token(&config, "unk_token"),
            pad_token: special_token(&config, "pad_token"),
        }))
    }

    /// A template from its source, with the BOS and EOS strings it may use
    /// (`path` names it in errors).
    pub fn from_source(
        source: &str,
        path: &Path,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> ChatTemplate {
        ChatTemplate {
            source: source.to_string(),
            path: path.to_path_buf(),
            bos_token: bos_token.map(str::to_string),
            eos_token: eos_token.map(str::to_string),
            unk_token: None,
            pad_token: None,
        }
    }

    /// The file the template came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The prompt text for `messages`, ending with the assistant's header
    /// when `add_generation_prompt`. Rendered like transformers does:
    /// `trim_blocks` and `lstrip_blocks` on, Python string methods available,
    /// `raise_exception` and `strftime_now` defined.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let mut environment = Environment::new();
        environment.set_trim_blocks(true);
        environment.set_lstrip_blocks(true);
        environment.set_fuel(Some(TEMPLATE_FUEL));
        environment.set_recursion_limit(64);
        environment.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        environment.add_function(
            "raise_exception",
            |message: String| -> std::result::Result<Value, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
            },
        );
        environment.add_function("strftime_now", |format: String| strftime_now(&format));
        let template = environment.template_from_str(&self.source).map_err(|error| {
            template_error(
                &self.path,
                format!("chat template does not parse: {}", describe(&error)),
            )
        })?;
        let context = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
            unk_token => self.unk_token,
            pad_token => self.pad_token,
        };
        let rendered = template.render(context).map_err(|error| {
            template_error(&self.path, format!("chat template failed: {}", describe(&error)))
        })?;
        if rendered.len() > MAX_RENDERED_BYTES {
            return Err(template_error(
                &self.path,
                format!(
                    "the rendered prompt has {} bytes, more than {MAX_RENDERED_BYTES}",
                    rendered.len()
                ),
            ));
        }
        Ok(rendered)
    }
}

/// minijinja's message with the line it points at, on one line.
fn describe(error: &minijinja::Error) -> String {
    let mut text = match error.detail() {
        Some(detail) => format!("{}: {detail}", error.kind()),
        None => error.kind().to_string(),
    };
    if error.kind() == ErrorKind::InvalidOperation
        && let Some(detail) = error.detail()
    {
        // raise_exception's message stands alone.
        text = detail.to_string();
    }
    if let Some(line) = error.line() {
        text.push_str(&format!(" (line {line})"));
    }
    text
}

/// Days since 1970-01-01 as a civil (year, month, day), proleptic Gregorian.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// `strftime_now(format)` of transformers' templates (Llama 3.1 writes the
/// date into its system prompt): the current UTC time with `%Y %m %d %B %b
/// %H %M %S %%`; other specifiers are an error, not a guess.
fn strftime_now(format: &str) -> std::result::Result<String, minijinja::Error> {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs() as i64);
    format_time(format, seconds)
}

fn format_time(format: &str, seconds: i64) -> std::result::Result<String, minijinja::Error> {
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let second_of_day = seconds.rem_euclid(86_400);
    let mut out = String::new();
    let mut characters = format.chars();
    while let Some(character) = characters.next() {
        if character != '%' {
            out.push(character);
            continue;
        }
        match characters.next() {
            Some('Y') => out.push_str(&year.to_string()),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('B') => out.push_str(MONTHS[month as usize - 1]),
            Some('b') => out.push_str(&MONTHS[month as usize - 1][..3]),
            Some('H') => out.push_str(&format!("{:02}", second_of_day / 3600)),
            Some('M') => out.push_str(&format!("{:02}", second_of_day / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", second_of_day % 60)),
            Some('%') => out.push('%'),
            other => {
                return Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "strftime_now: `%{}` is not supported (%Y %m %d %B %b %H %M %S %%)",
                        other.map(String::from).unwrap_or_default()
                    ),
                ));
            }
        }
    }
    Ok(out)
}

/// The end-of-sequence ids of `generation_config.json`, which may name more
/// than config.json (Llama 3 Instruct stops at `<|eot_id|>` too).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GenerationConfig {
    /// `eos_token_id`, one id or a list.
    pub eos_token_ids: Vec<u32>,
}

impl GenerationConfig {
    /// `directory/generation_config.json`, or the empty config when absent.
    pub fn from_directory(directory: &Path) -> Result<GenerationConfig> {
        let path = directory.join("generation_config.json");
        if !path.exists() {
            return Ok(GenerationConfig::default());
        }
        let bytes = crate::files::read_regular_file(&path, MAX_TEMPLATE_FILE_BYTES)?;
        Self::from_json(&bytes, &path)
    }

    /// Parses generation_config.json bytes (`path` names it in errors).
    pub fn from_json(bytes: &[u8], path: &Path) -> Result<GenerationConfig> {
        let invalid = |problem: String| ModelError::ConfigInvalid {
            path: path.to_path_buf(),
            problem,
        };
        let value: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|error| invalid(format!("malformed generation_config.json: {error}")))?;
        let ids: Vec<&serde_json::Value> = match value.get("eos_token_id") {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Array(list)) => list.iter().collect(),
            Some(one) => vec![one],
        };
        let eos_token_ids = ids
            .into_iter()
            .map(|id| match id.as_u64() {
                Some(id) if id <= u64::from(u32::MAX) => Ok(id as u32),
                _ => Err(invalid(format!(
                    "`eos_token_id` holds {}, not a token id (0..=4294967295)",
                    id.to_string().chars().take(40).collect::<String>()
                ))),
            })
            .collect::<Result<Vec<u32>>>()?;
        Ok(GenerationConfig { eos_token_ids })
    }
}

/// Text of generated ids as they come. Byte-level BPE splits characters
/// across tokens, so the text of the ids so far may end in an incomplete
/// character (decoded as U+FFFD): that tail is held back until the next
/// token completes it.
pub struct TextStream<'a> {
    tokenizer: &'a Tokenizer,
    ids: Vec<u32>,
    /// Bytes of the decoded text already handed out.
    emitted: usize,
}

impl<'a> TextStream<'a> {
    /// A stream decoding with `tokenizer`.
    pub fn new(tokenizer: &'a Tokenizer) -> Self {
        TextStream {
            tokenizer,
            ids: Vec::new(),
            emitted: 0,
        }
    }

    /// Adds `id`; returns the text it completed (often empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids)?;
        if text.ends_with('\u{FFFD}') {
            return Ok(String::new());
        }
        Ok(self.take_new(&text))
    }

    /// Whatever is still held back (an incomplete character at the end).
    pub fn finish(&mut self) -> Result<String> {
        let text = self.tokenizer.decode(&self.ids)?;
        Ok(self.take_new(&text))
    }

    fn take_new(&mut self, text: &str) -> String {
        // Decoding more ids may rewrite the end of earlier text (cleanup of
        // spaces); emit from the first byte that is both new and a boundary.
        let start = self.emitted.min(text.len());
        let start = (start..=text.len())
            .find(|&index| text.is_char_boundary(index))
            .unwrap_or(text.len());
        self.emitted = text.len();
        text[start..].to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_match_known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_779), (2026, 11, 22));
        assert_eq!(
            format_time("%d %b %Y %H:%M:%S %B %%", 20_779 * 86_400 + 3_723).unwrap(),
            "22 Nov 2026 01:02:03 November %"
        );
        assert!(format_time("%A", 0).is_err());
    }
}
