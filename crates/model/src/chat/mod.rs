//! Chat: the model's chat template (Jinja, rendered the way transformers
//! renders it), the stop tokens of `generation_config.json`, and a streaming
//! decoder that turns generated ids into text as they arrive. Split by job:
//! `environment` is the Jinja environment templates run in (transformers'
//! settings and functions), `files` reads the JSON files beside the
//! template, `stream` decodes generated ids; rendering is here.
//!
//! Templates come from the model directory, which may come from anyone, so
//! a render is bounded: minijinja's fuel stops runaway loops, the output is
//! capped, and recursion is limited.

mod environment;
mod files;
mod stream;

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use minijinja::Environment;
use minijinja::value::Value;
use serde::Serialize;

use crate::error::{ModelError, Result};
use environment::describe;
pub use files::GenerationConfig;
use files::{MAX_TEMPLATE_FILE_BYTES, read_json, special_token, template_in_config};
pub use stream::TextStream;

/// Where newer transformers versions save the chat template.
const TEMPLATE_FILE: &str = "chat_template.jinja";
/// Where older ones keep it, in the field `chat_template`.
const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
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

/// Whether a rendered conversation ends with the header of the assistant's
/// next turn (transformers' `add_generation_prompt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GenerationPrompt {
    /// End with the assistant's turn header, so the model writes the reply.
    Add,
    /// End after the last message, as the conversation stands.
    Omit,
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
        let mut environment = environment::environment();
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
    /// header when `prompt` is [`GenerationPrompt::Add`]. Templates see what
    /// transformers gives them: `messages`, `add_generation_prompt`, the
    /// special tokens (`bos_token`, `eos_token`, ...), `tools` and
    /// `documents` as none, `raise_exception(message)`, `strftime_now(format)`
    /// (UTC), and a `tojson` that spaces like Python's `json.dumps`. The text
    /// usually starts with BOS: encode it with
    /// [`Tokenizer::encode_without_special_tokens`](crate::Tokenizer::encode_without_special_tokens).
    ///
    /// The render's instructions (fuel) and output are bounded, but not the
    /// memory of values it never writes (a string doubled in a loop): a
    /// template from a file nobody checked belongs in a process with a
    /// memory limit, which is how `kscope` renders it.
    pub fn render(&self, messages: &[ChatMessage], prompt: GenerationPrompt) -> Result<String> {
        let fuel = FUEL_BASE + FUEL_PER_MESSAGE * messages.len() as u64;
        let mut environment = self.environment.clone();
        environment.set_fuel(Some(fuel));
        let template = environment
            .get_template(template_name(&self.path))
            .map_err(|error| self.error(describe(&error, None)))?;
        let mut context: BTreeMap<&str, Value> = BTreeMap::new();
        context.insert("messages", Value::from_serialize(messages));
        context.insert(
            "add_generation_prompt",
            Value::from(prompt == GenerationPrompt::Add),
        );
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
