//! What the chat tests share: model directories, the byte-level BPE tokenizer, the two templates.

use std::path::{Path, PathBuf};

use kernelscope_model::{ChatMessage, ChatTemplate, ModelError};
use serde_json::json;

/// An empty model directory unique to this test and process.
pub fn model_directory(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("kscope-chat-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).unwrap();
    directory
}

/// GPT-2's reversible map from bytes to printable characters: printable
/// Latin-1 bytes stand for themselves, the rest are shifted past 255.
fn byte_alphabet() -> Vec<char> {
    let printable = |byte: u32| {
        (0x21..=0x7E).contains(&byte) || (0xA1..=0xAC).contains(&byte) || (0xAE..=0xFF).contains(&byte)
    };
    let mut shifted = 0;
    (0..256u32)
        .map(|byte| {
            if printable(byte) {
                char::from_u32(byte).unwrap()
            } else {
                shifted += 1;
                char::from_u32(255 + shifted).unwrap()
            }
        })
        .collect()
}

/// Merges over byte strings, each part an earlier token: whole words, and
/// pieces of multi-byte characters so that token boundaries fall inside
/// characters (and one token, `\x80!`, starts with a continuation byte).
pub const MERGES: &[(&[u8], &[u8])] = &[
    (b"h", b"e"),
    (b"l", b"l"),
    (b"he", b"ll"),
    (b"hell", b"o"),
    (b" ", b"t"),
    (b" t", b"he"),
    (b"u", b"s"),
    (b"us", b"e"),
    (b"use", b"r"),
    (b"\xc3", b"\xa9"),
    (b"\xe4", b"\xb8"),
    (b"\xe4\xb8", b"\xad"),
    (b"\xf0", b"\x9f"),
    (b"\xf0\x9f", b"\x98"),
    (b"\x80", b"!"),
    (b"\n", b"\n"),
];

/// Where the special tokens start: after the bytes and the merges.
pub const SPECIAL_BASE: u32 = 256 + MERGES.len() as u32;

/// Writes `tokenizer.json` into `directory`: byte-level BPE with
/// `special_tokens` added after the vocabulary, and a post-processor that
/// prepends `bos` to encoded text when given.
pub fn write_tokenizer(directory: &Path, special_tokens: &[&str], bos: Option<&str>) {
    let alphabet = byte_alphabet();
    let spelled = |bytes: &[u8]| {
        bytes
            .iter()
            .map(|&byte| alphabet[byte as usize])
            .collect::<String>()
    };
    let mut vocab = serde_json::Map::new();
    for byte in 0..=255u8 {
        vocab.insert(spelled(&[byte]), json!(byte));
    }
    let mut merges = Vec::new();
    for (index, (left, right)) in MERGES.iter().enumerate() {
        merges.push(format!("{} {}", spelled(left), spelled(right)));
        vocab.insert(spelled(&[*left, *right].concat()), json!(256 + index));
    }
    let added_tokens: Vec<_> = special_tokens
        .iter()
        .enumerate()
        .map(|(index, content)| {
            json!({"id": SPECIAL_BASE + index as u32, "content": content, "single_word": false,
                   "lstrip": false, "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let post_processor = bos.map(|bos| {
        let id = SPECIAL_BASE + special_tokens.iter().position(|token| *token == bos).unwrap() as u32;
        json!({
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [id], "tokens": [bos]}}
        })
    });
    let byte_level =
        json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added_tokens,
        "normalizer": null,
        "pre_tokenizer": byte_level,
        "post_processor": post_processor,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": false, "vocab": vocab, "merges": merges}
    });
    std::fs::write(directory.join("tokenizer.json"), tokenizer.to_string()).unwrap();
}

pub const CHATML_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
pub const LLAMA3_TOKENS: [&str; 4] = [
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
];

/// Qwen2-style ChatML: a default system prompt, `.strip()` (pycompat), and
/// `raise_exception` for roles it does not know.
const CHATML_TEMPLATE: &str = r#"{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\n' + messages[0]['content'].strip() + '<|im_end|>\n' }}
{%- else %}
    {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role not in ['system', 'user', 'assistant'] %}
        {{- raise_exception('Unknown role: ' + message.role) }}
    {%- endif %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) or message.role == 'assistant' %}
        {{- '<|im_start|>' + message.role + '\n' + message.content.strip() + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"#;

/// Llama-3.1-style: `bos_token` first, a dated system header through
/// `strftime_now`, `| trim`, and `loop_controls`' `continue`.
pub const LLAMA3_TEMPLATE: &str = r#"{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = strftime_now("%d %b %Y") %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if loop.first and message['role'] == 'system' %}
        {%- continue %}
    {%- endif %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"#;

/// A Qwen2-like model directory: tokenizer.json plus the ChatML template in
/// tokenizer_config.json.
pub fn chatml_model(name: &str) -> PathBuf {
    let directory = model_directory(name);
    write_tokenizer(&directory, &CHATML_TOKENS, None);
    let config = json!({"bos_token": null, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                        "chat_template": CHATML_TEMPLATE});
    std::fs::write(directory.join("tokenizer_config.json"), config.to_string()).unwrap();
    directory
}

pub fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::new("system", "  You are terse.\n"),
        ChatMessage::new("user", "Hi there"),
        ChatMessage::new("assistant", "Hello! 😀"),
        ChatMessage::new("user", " What is 中文? "),
    ]
}

/// A template-error message, checking that it is one line naming `file`.
pub fn template_error<T: std::fmt::Debug>(result: kernelscope_model::Result<T>, file: &str) -> String {
    let error = result.unwrap_err();
    assert!(matches!(error, ModelError::ChatTemplate { .. }), "{error:?}");
    let message = error.to_string();
    assert!(!message.contains('\n'), "not one line: {message:?}");
    assert!(message.contains(file), "does not name {file}: {message}");
    message
}

/// A template in `chat_template.jinja` of a fresh directory.
pub fn jinja_template(name: &str, source: &str) -> kernelscope_model::Result<Option<ChatTemplate>> {
    let directory = model_directory(name);
    std::fs::write(directory.join("chat_template.jinja"), source).unwrap();
    let template = ChatTemplate::from_directory(&directory);
    std::fs::remove_dir_all(directory).unwrap();
    template
}
