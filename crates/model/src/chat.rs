//! Chat: the model's chat template (Jinja, rendered the way transformers
//! renders it), the stop tokens of `generation_config.json`, and a streaming
//! decoder that turns generated ids into text as they arrive.
//!
//! Templates come from the model directory, which may come from anyone, so
//! a render is bounded: minijinja's fuel stops runaway loops, the output is
//! capped, and recursion is limited.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::{Kwargs, Value};
use minijinja::{AutoEscape, Environment, ErrorKind};
use serde::Serialize;

use crate::error::{ModelError, Result};
use crate::tokenizer::Tokenizer;

/// Where newer transformers versions save the chat template.
const TEMPLATE_FILE: &str = "chat_template.jinja";
/// Where older ones keep it, in the field `chat_template`.
const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
/// The generation defaults, with the stop tokens.
const GENERATION_CONFIG_FILE: &str = "generation_config.json";

/// The special tokens of `tokenizer_config.json` passed to templates, as
/// transformers passes its `special_tokens_map`.
const SPECIAL_TOKEN_FIELDS: [&str; 4] = ["bos_token", "eos_token", "unk_token", "pad_token"];

/// Instructions any render may run. Real templates spend a few hundred per
/// message; this leaves room for tool and system-prompt logic while a
/// nested `range(100000)` loop stops in well under a second.
const FUEL_BASE: u64 = 1_000_000;
/// Extra instructions per message, so long conversations are not refused.
const FUEL_PER_MESSAGE: u64 = 20_000;
/// Bytes of output any render may write beyond twice the messages' own
/// text (a template echoes each message about once).
const OUTPUT_BASE_BYTES: usize = 1 << 20;
/// Nesting of macro calls and recursive loops; chat templates use a few.
const RECURSION_LIMIT: usize = 100;
/// Marks errors raised by the template's own `raise_exception(...)`, so
/// they read as the template's message rather than an engine failure.
const RAISED_MARKER: &str = "raise_exception: ";

/// The largest template source, tokenizer_config.json or
/// generation_config.json read (real ones are kilobytes).
const MAX_TEMPLATE_FILE_BYTES: u64 = 16 << 20;

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, or whatever the template accepts.
    pub role: String,
    /// The text of the message.
    pub content: String,
}

impl ChatMessage {
    /// A message with `role` and `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A model's chat template, compiled once, rendered per conversation.
pub struct ChatTemplate {
    environment: Environment<'static>,
    /// The file the template came from, for errors.
    path: PathBuf,
    /// `bos_token`, `eos_token`, ... as the template sees them.
    special_tokens: BTreeMap<&'static str, String>,
}

impl fmt::Debug for ChatTemplate {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("ChatTemplate")
            .field("path", &self.path)
            .field("special_tokens", &self.special_tokens)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// The template of the model directory `directory`: `chat_template.jinja`
    /// when present (it takes precedence, as in transformers), else the
    /// `chat_template` field of `tokenizer_config.json` (a string, or a list
    /// of `{"name", "template"}` of which the one named `default` is used).
    /// `None` when the model has no template. Syntax errors are reported
    /// here, naming the file.
    pub fn from_directory(directory: &Path) -> Result<Option<ChatTemplate>> {
        let config_path = directory.join(TOKENIZER_CONFIG_FILE);
        let config = read_json(&config_path, |path, problem| ModelError::ChatTemplate {
            path,
            problem,
        })?;
        let mut special_tokens = BTreeMap::new();
        if let Some(config) = &config {
            for field in SPECIAL_TOKEN_FIELDS {
                if let Some(token) =
                    special_token(config, field).map_err(|problem| ModelError::ChatTemplate {
                        path: config_path.clone(),
                        problem,
                    })?
                {
                    special_tokens.insert(field, token);
                }
            }
        }
        let jinja_path = directory.join(TEMPLATE_FILE);
        let (path, source) = if std::fs::symlink_metadata(&jinja_path).is_ok() {
            // A regular file of bounded size: a FIFO would block the read.
            let bytes = crate::files::read_regular_file(&jinja_path, MAX_TEMPLATE_FILE_BYTES)?;
            let source = String::from_utf8(bytes).map_err(|_| ModelError::ChatTemplate {
                path: jinja_path.clone(),
                problem: "not UTF-8 text".into(),
            })?;
            (jinja_path, source)
        } else {
            let template = match &config {
                Some(config) => template_in_config(config).map_err(|problem| ModelError::ChatTemplate {
                    path: config_path.clone(),
                    problem,
                })?,
                None => None,
            };
            match template {
                Some(source) => (config_path, source),
                None => return Ok(None),
            }
        };
        ChatTemplate::compile(path, source, special_tokens).map(Some)
    }

    /// A template from its source text and the BOS and EOS strings it may
    /// use; `path` names it in errors (for tests and fuzzing).
    pub fn from_source(
        source: &str,
        path: &Path,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Result<ChatTemplate> {
        let mut special_tokens = BTreeMap::new();
        if let Some(token) = bos_token {
            special_tokens.insert("bos_token", token.to_string());
        }
        if let Some(token) = eos_token {
            special_tokens.insert("eos_token", token.to_string());
        }
        ChatTemplate::compile(path.to_path_buf(), source.to_string(), special_tokens)
    }

    fn compile(
        path: PathBuf,
        source: String,
        special_tokens: BTreeMap<&'static str, String>,
    ) -> Result<ChatTemplate> {
        let mut environment = Environment::new();
        // transformers' settings: blocks eat their newline and leading
        // whitespace, and nothing is escaped (the template name ends in
        // `.json` for tokenizer_config.json, which would otherwise turn
        // on JSON escaping).
        environment.set_trim_blocks(true);
        environment.set_lstrip_blocks(true);
        environment.set_auto_escape_callback(|_| AutoEscape::None);
        environment.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        environment.set_recursion_limit(RECURSION_LIMIT);
        environment.add_function("raise_exception", raise_exception);
        environment.add_function("strftime_now", strftime_now);
        environment.add_filter("tojson", python_tojson);
        environment
            .add_template_owned(template_name(&path), source)
            .map_err(|error| ModelError::ChatTemplate {
                path: path.clone(),
                problem: describe(&error, None),
            })?;
        Ok(ChatTemplate {
            environment,
            path,
            special_tokens,
        })
    }

    /// The file the template came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `bos_token` of `tokenizer_config.json`, if it names one.
    pub fn bos_token(&self) -> Option<&str> {
        self.special_tokens.get("bos_token").map(String::as_str)
    }

    /// `eos_token` of `tokenizer_config.json`, if it names one: chat models
    /// often end a turn with it (`<|im_end|>`) rather than with the ids of
    /// `generation_config.json`.
    pub fn eos_token(&self) -> Option<&str> {
        self.special_tokens.get("eos_token").map(String::as_str)
    }

    /// The prompt text for `messages`, ending with the assistant's turn
    /// header when `add_generation_prompt`. Templates see what transformers
    /// gives them: `messages`, `add_generation_prompt`, the special tokens
    /// (`bos_token`, `eos_token`, ...), `tools` and `documents` as none,
    /// `raise_exception(message)`, `strftime_now(format)` (UTC), and a
    /// `tojson` that spaces like Python's `json.dumps`. The text usually
    /// starts with BOS: encode it with
    /// [`Tokenizer::encode_without_special_tokens`].
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let fuel = FUEL_BASE + FUEL_PER_MESSAGE * messages.len() as u64;
        let mut environment = self.environment.clone();
        environment.set_fuel(Some(fuel));
        let template = environment
            .get_template(template_name(&self.path))
            .map_err(|error| self.error(describe(&error, None)))?;
        let mut context: BTreeMap<&str, Value> = BTreeMap::new();
        context.insert("messages", Value::from_serialize(messages));
        context.insert("add_generation_prompt", Value::from(add_generation_prompt));
        // transformers passes `tools=None, documents=None` when there are
        // none, so `tools is not none` is false and `tools is defined` true.
        context.insert("tools", Value::from(()));
        context.insert("documents", Value::from(()));
        for (field, token) in &self.special_tokens {
            context.insert(field, Value::from(token.as_str()));
        }
        let message_bytes: usize = messages
            .iter()
            .map(|message| message.role.len() + message.content.len())
            .sum();
        let mut output = BoundedOutput {
            bytes: Vec::new(),
            limit: OUTPUT_BASE_BYTES.saturating_add(message_bytes.saturating_mul(2)),
            exceeded: false,
        };
        if let Err(error) = template.render_captured_to(context, &mut output) {
            if output.exceeded {
                return Err(self.error(format!(
                    "the rendered prompt exceeds {} bytes, the bound for {} messages (a runaway template?)",
                    output.limit,
                    messages.len()
                )));
            }
            return Err(self.error(describe(&error, Some(fuel))));
        }
        String::from_utf8(output.bytes)
            .map_err(|_| self.error("the rendered prompt is not valid UTF-8".to_string()))
    }

    fn error(&self, problem: String) -> ModelError {
        ModelError::ChatTemplate {
            path: self.path.clone(),
            problem,
        }
    }
}

/// The name the template is stored under: its file's name, which
/// minijinja's messages would show.
fn template_name(path: &Path) -> &'static str {
    if path.ends_with(TEMPLATE_FILE) {
        TEMPLATE_FILE
    } else {
        TOKENIZER_CONFIG_FILE
    }
}

/// `tokenizer_config.json`'s `chat_template`: a string, a list of named
/// templates (the `default` one), or absent.
fn template_in_config(config: &serde_json::Value) -> std::result::Result<Option<String>, String> {
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
fn special_token(config: &serde_json::Value, field: &str) -> std::result::Result<Option<String>, String> {
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
fn read_json(
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

/// A minijinja error as one line: what went wrong, the template line, and
/// the causes. `fuel` is the render's budget, named when it ran out.
fn describe(error: &minijinja::Error, fuel: Option<u64>) -> String {
    let mut text = match (error.kind(), error.detail()) {
        (ErrorKind::OutOfFuel, _) => format!(
            "the template ran out of fuel after {} instructions (a loop too long for a chat prompt)",
            fuel.unwrap_or_default()
        ),
        (ErrorKind::InvalidOperation, Some(detail)) if detail.starts_with(RAISED_MARKER) => {
            format!(
                "the template raised an exception: {}",
                &detail[RAISED_MARKER.len()..]
            )
        }
        (kind, Some(detail)) => format!("{kind}: {detail}"),
        (kind, None) => kind.to_string(),
    };
    if let Some(line) = error.line() {
        text.push_str(&format!(" (template line {line})"));
    }
    let mut cause = std::error::Error::source(error);
    while let Some(inner) = cause {
        text.push_str(&format!(": {inner}"));
        cause = inner.source();
    }
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Collects the render, failing the write once it passes `limit` bytes so
/// that a template cannot fill memory with output.
struct BoundedOutput {
    bytes: Vec<u8>,
    limit: usize,
    exceeded: bool,
}

impl Write for BoundedOutput {
    fn write(&mut self, buffer: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buffer.len() > self.limit {
            self.exceeded = true;
            return Err(std::io::Error::other("the rendered prompt is too long"));
        }
        self.bytes.extend_from_slice(buffer);
        Ok(buffer.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// transformers' `raise_exception(message)`: the template refuses the input.
fn raise_exception(message: Value) -> std::result::Result<Value, minijinja::Error> {
    let message = match message.as_str() {
        Some(text) => text.to_string(),
        None => message.to_string(),
    };
    Err(minijinja::Error::new(
        ErrorKind::InvalidOperation,
        format!("{RAISED_MARKER}{message}"),
    ))
}

/// transformers' `strftime_now(format)`, in UTC (transformers uses local
/// time; the date is what templates want, and UTC needs no time zone data).
fn strftime_now(format: &str) -> std::result::Result<String, minijinja::Error> {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs() as i64)
        .unwrap_or_default();
    format_utc(format, seconds).map_err(|problem| minijinja::Error::new(ErrorKind::InvalidOperation, problem))
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
const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// `format` with C `strftime` specifiers filled in for the UTC time
/// `seconds` after the Unix epoch. The specifiers chat templates use are
/// supported, with glibc's `-` flag (`%-d`) to drop padding; any other is
/// an error naming it, rather than a silently wrong prompt.
fn format_utc(format: &str, seconds: i64) -> std::result::Result<String, String> {
    let days = seconds.div_euclid(86_400);
    let second_of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (second_of_day / 3600, second_of_day / 60 % 60, second_of_day % 60);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    const DAYS_BEFORE_MONTH: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let day_of_year = DAYS_BEFORE_MONTH[month as usize - 1] + day + i64::from(leap && month > 2);
    // 1970-01-01 was a Thursday.
    let weekday = WEEKDAYS[(days + 4).rem_euclid(7) as usize];
    let month_name = MONTHS[month as usize - 1];
    let hour_12 = if hour % 12 == 0 { 12 } else { hour % 12 };

    let mut text = String::new();
    let mut characters = format.chars();
    while let Some(character) = characters.next() {
        if character != '%' {
            text.push(character);
            continue;
        }
        let mut specifier = characters.next();
        let unpadded = specifier == Some('-');
        if unpadded {
            specifier = characters.next();
        }
        let number = |value: i64, width: usize| {
            if unpadded {
                value.to_string()
            } else {
                format!("{value:0width$}")
            }
        };
        match specifier {
            Some('Y') => text.push_str(&year.to_string()),
            Some('y') => text.push_str(&number(year.rem_euclid(100), 2)),
            Some('m') => text.push_str(&number(month, 2)),
            Some('d') => text.push_str(&number(day, 2)),
            Some('e') => text.push_str(&format!("{day:>2}")),
            Some('j') => text.push_str(&number(day_of_year, 3)),
            Some('H') => text.push_str(&number(hour, 2)),
            Some('I') => text.push_str(&number(hour_12, 2)),
            Some('M') => text.push_str(&number(minute, 2)),
            Some('S') => text.push_str(&number(second, 2)),
            Some('p') => text.push_str(if hour < 12 { "AM" } else { "PM" }),
            Some('B') => text.push_str(month_name),
            Some('b') | Some('h') => text.push_str(&month_name[..3]),
            Some('A') => text.push_str(weekday),
            Some('a') => text.push_str(&weekday[..3]),
            Some('F') => text.push_str(&format!("{year}-{month:02}-{day:02}")),
            Some('T') => text.push_str(&format!("{hour:02}:{minute:02}:{second:02}")),
            Some('%') => text.push('%'),
            other => {
                let shown = other
                    .map(|character| format!("%{character}"))
                    .unwrap_or_else(|| "a trailing %".into());
                return Err(format!(
                    "strftime_now: {shown} is not supported (supported: %Y %y %m %d %e %j %H %I %M %S %p %B %b %h %A %a %F %T %%, and %- to drop padding)"
                ));
            }
        }
    }
    Ok(text)
}

/// The proleptic Gregorian (year, month, day) of `days` after 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// transformers' `tojson` filter: Python's `json.dumps(value,
/// ensure_ascii=False, indent=indent)`, whose spacing (`", "`, `": "`)
/// differs from compact JSON, and which leaves `<`, `>`, `&` unescaped.
/// Tool-calling templates render schemas with it; the model was trained on
/// Python's spacing.
fn python_tojson(
    value: &Value,
    indent: Option<Value>,
    arguments: Kwargs,
) -> std::result::Result<Value, minijinja::Error> {
    let indent: Option<Value> = match indent {
        Some(indent) => Some(indent),
        None => arguments.get("indent")?,
    };
    arguments.assert_all_used()?;
    let mut bytes = Vec::new();
    let written = match indent.filter(|indent| !indent.is_none()) {
        Some(indent) => {
            let width = usize::try_from(indent)?;
            let indentation = " ".repeat(width.min(64));
            let formatter = serde_json::ser::PrettyFormatter::with_indent(indentation.as_bytes());
            value.serialize(&mut serde_json::Serializer::with_formatter(&mut bytes, formatter))
        }
        None => value.serialize(&mut serde_json::Serializer::with_formatter(
            &mut bytes,
            PythonJsonFormatter,
        )),
    };
    written.map_err(|error| {
        minijinja::Error::new(ErrorKind::InvalidOperation, "tojson: cannot serialize the value")
            .with_source(error)
    })?;
    let text = String::from_utf8(bytes)
        .map_err(|_| minijinja::Error::new(ErrorKind::InvalidOperation, "tojson: the JSON is not UTF-8"))?;
    Ok(Value::from_safe_string(text))
}

/// Python's default `json.dumps` separators: `", "` and `": "`.
struct PythonJsonFormatter;

impl serde_json::ser::Formatter for PythonJsonFormatter {
    fn begin_array_value<W: ?Sized + Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { writer.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { writer.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        writer.write_all(b": ")
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

/// Turns generated token ids into text as they arrive.
///
/// Decoding one id at a time is wrong twice over: byte-level BPE splits a
/// multi-byte character over several tokens (each alone decodes to U+FFFD),
/// and SentencePiece decoders strip a leading space at the start of a text.
/// So the stream decodes the ids since the last emitted boundary together
/// with the previously emitted ones as context, emits only the new suffix,
/// and holds text back while it ends in U+FFFD (an incomplete character).
pub struct TextStream<'a> {
    tokenizer: &'a Tokenizer,
    /// The ids last emitted (context) followed by the ids not yet emitted.
    ids: Vec<u32>,
    /// How many of `ids` were emitted.
    emitted: usize,
}

impl<'a> TextStream<'a> {
    /// A stream with nothing decoded yet.
    pub fn new(tokenizer: &'a Tokenizer) -> TextStream<'a> {
        TextStream {
            tokenizer,
            ids: Vec::new(),
            emitted: 0,
        }
    }

    /// Adds the generated `id`; returns the text it completes, which may
    /// be empty (a partial character, a skipped special token).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let context = self.tokenizer.decode(&self.ids[..self.emitted])?;
        let text = self.tokenizer.decode(&self.ids)?;
        if text.ends_with('\u{FFFD}') {
            return Ok(String::new());
        }
        match text.get(context.len()..) {
            Some(new) if !new.is_empty() => {
                let new = new.to_string();
                // The ids just emitted become the context of the next.
                self.ids.drain(..self.emitted);
                self.emitted = self.ids.len();
                Ok(new)
            }
            _ => Ok(String::new()),
        }
    }

    /// Whatever is held back (an incomplete character at the end of the
    /// generation comes out as U+FFFD); the stream then starts afresh.
    pub fn finish(&mut self) -> Result<String> {
        let rest = if self.ids.len() > self.emitted {
            let context = self.tokenizer.decode(&self.ids[..self.emitted])?;
            let text = self.tokenizer.decode(&self.ids)?;
            match text.get(context.len()..) {
                Some(new) => new.to_string(),
                None => text,
            }
        } else {
            String::new()
        };
        self.ids.clear();
        self.emitted = 0;
        Ok(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::format_utc;

    #[test]
    fn dates_match_python_strftime() {
        let format = "%Y-%m-%d %H:%M:%S %A %a %B %b %j %I %p %y %e";
        // Expected strings from Python's datetime.strftime in UTC.
        for (seconds, expected) in [
            (0, "1970-01-01 00:00:00 Thursday Thu January Jan 001 12 AM 70  1"),
            (
                951_782_400,
                "2000-02-29 00:00:00 Tuesday Tue February Feb 060 12 AM 00 29",
            ),
            (
                1_709_251_199,
                "2024-02-29 23:59:59 Thursday Thu February Feb 060 11 PM 24 29",
            ),
            (
                4_102_444_799,
                "2099-12-31 23:59:59 Thursday Thu December Dec 365 11 PM 99 31",
            ),
            (
                1_735_689_600,
                "2025-01-01 00:00:00 Wednesday Wed January Jan 001 12 AM 25  1",
            ),
        ] {
            assert_eq!(format_utc(format, seconds).unwrap(), expected, "at {seconds}");
        }
        assert_eq!(format_utc("%d %b %Y", 1_709_251_199).unwrap(), "29 Feb 2024");
        assert_eq!(
            format_utc("%-d/%-m %F %T %%", 1_735_689_600).unwrap(),
            "1/1 2025-01-01 00:00:00 %"
        );
    }

    #[test]
    fn unsupported_specifiers_are_named() {
        let error = format_utc("%Y %Q", 0).unwrap_err();
        assert!(error.contains("%Q is not supported"), "{error}");
        assert!(format_utc("100%", 0).unwrap_err().contains("a trailing %"));
    }
}
