//! The chat path: a template (untrusted Jinja) rendered over a conversation,
//! the text encoded by a byte-level BPE tokenizer and decoded back as a
//! stream. Input: the template, a NUL byte, then the user's message. Any
//! input must render or fail on one line, within the template's fuel, and
//! the streamed text must equal the text decoded at once.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use kernelscope_model::synthetic::byte_level_tokenizer_json;
use kernelscope_model::{ChatMessage, ChatTemplate, GenerationPrompt, TextStream, Tokenizer};
use libfuzzer_sys::fuzz_target;

fn tokenizer() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        let json = byte_level_tokenizer_json(&["h e", "l l", "Ġ t", "i n"], &["<|im_start|>", "<|im_end|>"]);
        Tokenizer::from_bytes(json.as_bytes(), Path::new("tokenizer.json")).expect("a valid tokenizer")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (source, message) = text.split_once('\0').unwrap_or((text, "hello"));
    let template = match ChatTemplate::from_source(source, Path::new("chat_template.jinja"), Some("<s>"), Some("</s>")) {
        Ok(template) => template,
        Err(error) => {
            assert!(!error.to_string().contains('\n'), "one line: {error}");
            return;
        }
    };
    let messages = [ChatMessage::new("system", "be brief"), ChatMessage::new("user", message)];
    let rendered = match template.render(&messages, GenerationPrompt::Add) {
        Ok(rendered) => rendered,
        Err(error) => {
            assert!(!error.to_string().contains('\n'), "one line: {error}");
            return;
        }
    };
    let tokenizer = tokenizer();
    let Ok(ids) = tokenizer.encode_without_special_tokens(&rendered) else {
        return;
    };
    let whole = tokenizer.decode(&ids).expect("decodes");
    let mut stream = TextStream::new(tokenizer);
    let mut streamed = String::new();
    for &id in &ids {
        streamed.push_str(&stream.push(id).expect("decodes"));
    }
    streamed.push_str(&stream.finish().expect("decodes"));
    assert_eq!(streamed, whole);
});
