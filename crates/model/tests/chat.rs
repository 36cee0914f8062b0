//! Chat templates, generation_config.json and streaming decode, on model
//! directories written here: a small byte-level BPE `tokenizer.json` (the
//! GPT-2 byte alphabet, a few merges, ChatML and Llama-3 special tokens), a
//! Qwen2-style ChatML template and a Llama-3-style one.

use std::path::{Path, PathBuf};

use kernelscope::rng::SplitMix64;
use kernelscope_model::{
    ChatMessage, ChatTemplate, GenerationConfig, GenerationPrompt, ModelError, TextStream, Tokenizer,
};
use serde_json::json;

/// An empty model directory unique to this test and process.
fn model_directory(name: &str) -> PathBuf {
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
const MERGES: &[(&[u8], &[u8])] = &[
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
const SPECIAL_BASE: u32 = 256 + MERGES.len() as u32;

/// Writes `tokenizer.json` into `directory`: byte-level BPE with
/// `special_tokens` added after the vocabulary, and a post-processor that
/// prepends `bos` to encoded text when given.
fn write_tokenizer(directory: &Path, special_tokens: &[&str], bos: Option<&str>) {
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

const CHATML_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
const LLAMA3_TOKENS: [&str; 4] = [
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
const LLAMA3_TEMPLATE: &str = r#"{{- bos_token }}
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
fn chatml_model(name: &str) -> PathBuf {
    let directory = model_directory(name);
    write_tokenizer(&directory, &CHATML_TOKENS, None);
    let config = json!({"bos_token": null, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                        "chat_template": CHATML_TEMPLATE});
    std::fs::write(directory.join("tokenizer_config.json"), config.to_string()).unwrap();
    directory
}

fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::new("system", "  You are terse.\n"),
        ChatMessage::new("user", "Hi there"),
        ChatMessage::new("assistant", "Hello! 😀"),
        ChatMessage::new("user", " What is 中文? "),
    ]
}

/// A template-error message, checking that it is one line naming `file`.
fn template_error<T: std::fmt::Debug>(result: kernelscope_model::Result<T>, file: &str) -> String {
    let error = result.unwrap_err();
    assert!(matches!(error, ModelError::ChatTemplate { .. }), "{error:?}");
    let message = error.to_string();
    assert!(!message.contains('\n'), "not one line: {message:?}");
    assert!(message.contains(file), "does not name {file}: {message}");
    message
}

/// A template in `chat_template.jinja` of a fresh directory.
fn jinja_template(name: &str, source: &str) -> kernelscope_model::Result<Option<ChatTemplate>> {
    let directory = model_directory(name);
    std::fs::write(directory.join("chat_template.jinja"), source).unwrap();
    let template = ChatTemplate::from_directory(&directory);
    std::fs::remove_dir_all(directory).unwrap();
    template
}

#[test]
fn chatml_conversation_renders_exactly() {
    let directory = chatml_model("chatml");
    let template = ChatTemplate::from_directory(&directory).unwrap().unwrap();
    assert!(template.path().ends_with("tokenizer_config.json"));
    assert_eq!(template.bos_token(), None);
    assert_eq!(template.eos_token(), Some("<|im_end|>"));

    let turns = "<|im_start|>system\nYou are terse.<|im_end|>\n\
                 <|im_start|>user\nHi there<|im_end|>\n\
                 <|im_start|>assistant\nHello! 😀<|im_end|>\n\
                 <|im_start|>user\nWhat is 中文?<|im_end|>\n";
    assert_eq!(
        template.render(&conversation(), GenerationPrompt::Omit).unwrap(),
        turns
    );
    assert_eq!(
        template.render(&conversation(), GenerationPrompt::Add).unwrap(),
        format!("{turns}<|im_start|>assistant\n")
    );
    // Without a system message the template supplies its own.
    assert_eq!(
        template
            .render(&conversation()[1..2], GenerationPrompt::Add)
            .unwrap(),
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n\
         <|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    );
    std::fs::remove_dir_all(directory).unwrap();
}

#[test]
fn llama3_template_gets_bos_and_todays_date() {
    let directory = model_directory("llama3");
    write_tokenizer(&directory, &LLAMA3_TOKENS, Some("<|begin_of_text|>"));
    // bos_token as an AddedToken object, as older tokenizer_config.json files have it.
    let config = json!({"bos_token": {"__type": "AddedToken", "content": "<|begin_of_text|>", "lstrip": false},
                        "eos_token": "<|eot_id|>"});
    std::fs::write(directory.join("tokenizer_config.json"), config.to_string()).unwrap();
    std::fs::write(directory.join("chat_template.jinja"), LLAMA3_TEMPLATE).unwrap();
    let template = ChatTemplate::from_directory(&directory).unwrap().unwrap();
    assert_eq!(template.bos_token(), Some("<|begin_of_text|>"));

    let text = template.render(&conversation(), GenerationPrompt::Add).unwrap();
    // The date is today's: check its shape, then compare the rest exactly.
    let marker = "Today Date: ";
    let start = text.find(marker).unwrap() + marker.len();
    let date = &text[start..start + 11];
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    assert!(date[..2].bytes().all(|byte| byte.is_ascii_digit()), "{date}");
    assert!(months.contains(&&date[3..6]), "{date}");
    assert!(date[7..].parse::<u32>().unwrap() >= 2025, "{date}");
    assert_eq!(
        text.replace(date, "DD Mon YYYY"),
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n\
         Today Date: DD Mon YYYY\n\nYou are terse.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\nHello! 😀<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nWhat is 中文?<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );

    // The rendered text carries BOS already: encode it without adding another.
    let tokenizer = Tokenizer::from_directory(&directory).unwrap().unwrap();
    let bos = tokenizer.token_id("<|begin_of_text|>").unwrap();
    assert_eq!(bos, SPECIAL_BASE);
    let ids = tokenizer.encode_without_special_tokens(&text).unwrap();
    assert_eq!(ids.iter().filter(|&&id| id == bos).count(), 1);
    assert_eq!(ids[0], bos);
    let doubled = tokenizer.encode(&text).unwrap();
    assert_eq!(
        &doubled[..2],
        &[bos, bos],
        "encode() adds the post-processor's BOS"
    );
    assert_eq!(&doubled[1..], &ids[..]);
    std::fs::remove_dir_all(directory).unwrap();
}

#[test]
fn special_tokens_encode_as_single_ids() {
    let directory = chatml_model("special");
    let tokenizer = Tokenizer::from_directory(&directory).unwrap().unwrap();
    let [end_of_text, start, end] = CHATML_TOKENS.map(|token| tokenizer.token_id(token).unwrap());
    assert_eq!(
        [end_of_text, start, end],
        [SPECIAL_BASE, SPECIAL_BASE + 1, SPECIAL_BASE + 2]
    );
    assert_eq!(tokenizer.token_id("<|im_middle|>"), None);

    let ids = tokenizer
        .encode_without_special_tokens("<|im_start|>user\nhello the user<|im_end|>\n")
        .unwrap();
    let mut expected = vec![start];
    expected.extend(
        tokenizer
            .encode_without_special_tokens("user\nhello the user")
            .unwrap(),
    );
    expected.push(end);
    expected.extend(tokenizer.encode_without_special_tokens("\n").unwrap());
    assert_eq!(ids, expected);
    // The merges applied (`user`, `hello`, ` the` are single tokens; ` user`
    // is a space and `user`), and no special token was spelled out in bytes
    // (`<` is byte 0x3C).
    let byte_ids = tokenizer
        .encode_without_special_tokens("user\nhello the user")
        .unwrap();
    assert_eq!(byte_ids.len(), 6, "{byte_ids:?}");
    assert!(!ids.contains(&u32::from(b'<')), "{ids:?}");

    // A whole rendered chat: one id per special token written in it.
    let template = ChatTemplate::from_directory(&directory).unwrap().unwrap();
    let text = template.render(&conversation(), GenerationPrompt::Add).unwrap();
    let ids = tokenizer.encode_without_special_tokens(&text).unwrap();
    assert_eq!(
        ids.iter().filter(|&&id| id == start).count(),
        text.matches("<|im_start|>").count()
    );
    assert_eq!(
        ids.iter().filter(|&&id| id == end).count(),
        text.matches("<|im_end|>").count()
    );
    // Streaming the ids back gives the text with special tokens skipped.
    let mut stream = TextStream::new(&tokenizer);
    let mut streamed = String::new();
    for &id in &ids {
        streamed.push_str(&stream.push(id).unwrap());
    }
    streamed.push_str(&stream.finish().unwrap());
    assert_eq!(
        streamed,
        text.replace("<|im_start|>", "").replace("<|im_end|>", "")
    );
    std::fs::remove_dir_all(directory).unwrap();
}

/// Random text over ASCII, whitespace, and 2-, 3- and 4-byte characters,
/// some of which the merges split mid-character.
fn random_text(random: &mut SplitMix64) -> String {
    const PIECES: &[&str] = &[
        "a", "e", "h", "l", "o", "t", "u", "s", "r", "z", "Q", "7", " ", " ", "\n", "\t", "!", ",", "<", "|",
        "é", "ß", "Ж", "中", "文", "字", "ア", "😀", "😃", "🚀", "👍🏽", "e\u{301}", "hello", " the", "user",
        "\u{80}",
    ];
    let length = 1 + random.below(40) as usize;
    (0..length)
        .map(|_| PIECES[random.below(PIECES.len() as u64) as usize])
        .collect()
}

#[test]
fn streaming_decode_round_trips_random_text() {
    let directory = chatml_model("stream");
    let tokenizer = Tokenizer::from_directory(&directory).unwrap().unwrap();
    let mut random = SplitMix64::new(2024);
    let mut held_back = 0;
    let mut merged_tokens = 0;
    for _ in 0..300 {
        let text = random_text(&mut random);
        let ids = tokenizer.encode_without_special_tokens(&text).unwrap();
        merged_tokens += ids
            .iter()
            .filter(|&&id| (256..SPECIAL_BASE).contains(&id))
            .count();
        let mut stream = TextStream::new(&tokenizer);
        let mut streamed = String::new();
        for &id in &ids {
            let chunk = stream.push(id).unwrap();
            assert!(!chunk.contains('\u{FFFD}'), "chunk {chunk:?} of {text:?}");
            held_back += usize::from(chunk.is_empty());
            streamed.push_str(&chunk);
        }
        let rest = stream.finish().unwrap();
        assert!(!rest.contains('\u{FFFD}'));
        streamed.push_str(&rest);
        assert_eq!(streamed, text, "ids {ids:?}");
        assert_eq!(tokenizer.decode(&ids).unwrap(), text);
    }
    // The test meant something: characters were split across tokens, and merges applied.
    assert!(held_back > 100, "{held_back}");
    assert!(merged_tokens > 100, "{merged_tokens}");
    std::fs::remove_dir_all(directory).unwrap();
}

#[test]
fn a_dangling_partial_character_comes_out_at_finish() {
    let directory = chatml_model("dangling");
    let tokenizer = Tokenizer::from_directory(&directory).unwrap().unwrap();
    let mut stream = TextStream::new(&tokenizer);
    assert_eq!(stream.push(u32::from(b'a')).unwrap(), "a");
    // 0xF0 0x9F 0x98 is three bytes of a four-byte emoji: held back.
    let merge = MERGES
        .iter()
        .position(|(left, right)| [*left, *right].concat() == b"\xf0\x9f\x98");
    let partial = 256 + merge.unwrap() as u32;
    assert_eq!(stream.push(partial).unwrap(), "");
    assert_eq!(stream.finish().unwrap(), "\u{FFFD}");
    // The stream starts afresh.
    assert_eq!(stream.push(u32::from(b'b')).unwrap(), "b");
    assert_eq!(stream.finish().unwrap(), "");
    std::fs::remove_dir_all(directory).unwrap();
}

#[test]
fn template_errors_name_the_file_and_line() {
    let message = template_error(
        jinja_template("syntax", "{% for m in messages %}\n{{ m.content }\n"),
        "chat_template.jinja",
    );
    assert!(message.contains("syntax error"), "{message}");
    assert!(message.contains("template line 2"), "{message}");

    let message = template_error(
        jinja_template("unclosed", "{% for m in messages %}{{ m.content }}"),
        "chat_template.jinja",
    );
    assert!(message.contains("syntax error"), "{message}");

    // raise_exception and the unknown-role check of the ChatML template.
    let directory = chatml_model("raise");
    let template = ChatTemplate::from_directory(&directory).unwrap().unwrap();
    let messages = [ChatMessage::new("user", "hi"), ChatMessage::new("tool", "42")];
    let message = template_error(
        template.render(&messages, GenerationPrompt::Add),
        "tokenizer_config.json",
    );
    assert!(
        message.contains("the template raised an exception: Unknown role: tool"),
        "{message}"
    );
    assert!(message.contains("template line 8"), "{message}");

    let raising = jinja_template(
        "raising",
        "a\n{{ raise_exception('Conversation roles must alternate\\nuser/assistant') }}",
    )
    .unwrap()
    .unwrap();
    let message = template_error(
        raising.render(&messages, GenerationPrompt::Omit),
        "chat_template.jinja",
    );
    assert!(
        message.contains("Conversation roles must alternate user/assistant (template line 2)"),
        "{message}"
    );

    // Unknown functions and methods are errors, not silent blanks.
    let unknown = jinja_template("unknown", "{{ messages[0].content.frobnicate() }}")
        .unwrap()
        .unwrap();
    template_error(
        unknown.render(&messages, GenerationPrompt::Omit),
        "chat_template.jinja",
    );
    let unsupported = jinja_template("strftime", "{{ strftime_now('%Y %Q') }}")
        .unwrap()
        .unwrap();
    let message = template_error(
        unsupported.render(&messages, GenerationPrompt::Omit),
        "chat_template.jinja",
    );
    assert!(message.contains("%Q is not supported"), "{message}");
    std::fs::remove_dir_all(directory).unwrap();
}

#[test]
fn runaway_templates_are_stopped() {
    let messages = conversation();
    let looping = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
    let template = jinja_template("fuel", looping).unwrap().unwrap();
    let message = template_error(
        template.render(&messages, GenerationPrompt::Add),
        "chat_template.jinja",
    );
    assert!(message.contains("ran out of fuel"), "{message}");

    let flooding = "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}";
    let template = jinja_template("output", flooding).unwrap().unwrap();
    let message = template_error(
        template.render(&messages, GenerationPrompt::Add),
        "chat_template.jinja",
    );
    assert!(message.contains("the rendered prompt exceeds"), "{message}");

    let recursing = "{% macro deeper(n) %}{{ deeper(n + 1) }}{% endmacro %}{{ deeper(0) }}";
    let template = jinja_template("recursion", recursing).unwrap().unwrap();
    let message = template_error(
        template.render(&messages, GenerationPrompt::Add),
        "chat_template.jinja",
    );
    assert!(message.contains("recursion"), "{message}");
}

#[test]
fn templates_get_python_string_methods_and_json() {
    let source = "{{ messages[0].content.split(',') | join('|') }} {{ messages[0].content.startswith('a') }} \
                  {{ messages[0].content.upper() }} {{ messages[0] | tojson }}\n{{ messages[0] | tojson(indent=2) }}\n\
                  {{ tools is none }} {{ documents is defined }}";
    let template = jinja_template("pycompat", source).unwrap().unwrap();
    let text = template
        .render(&[ChatMessage::new("user", "a,<b>,é")], GenerationPrompt::Omit)
        .unwrap();
    assert_eq!(
        text,
        "a|<b>|é True A,<B>,É {\"role\": \"user\", \"content\": \"a,<b>,é\"}\n\
         {\n  \"role\": \"user\",\n  \"content\": \"a,<b>,é\"\n}\nTrue True"
    );
}

#[test]
fn chat_template_jinja_takes_precedence_over_tokenizer_config() {
    let directory = chatml_model("precedence");
    std::fs::write(
        directory.join("chat_template.jinja"),
        "JINJA {{ eos_token }} {{ messages[0].content }}",
    )
    .unwrap();
    let template = ChatTemplate::from_directory(&directory).unwrap().unwrap();
    assert!(template.path().ends_with("chat_template.jinja"));
    assert_eq!(
        template
            .render(&conversation()[1..2], GenerationPrompt::Omit)
            .unwrap(),
        "JINJA <|im_end|> Hi there"
    );
    std::fs::remove_dir_all(directory).unwrap();
}

#[test]
fn named_templates_use_the_default_one() {
    let directory = model_directory("named");
    let write = |templates: serde_json::Value| {
        let config = json!({"bos_token": "<s>", "chat_template": templates});
        std::fs::write(directory.join("tokenizer_config.json"), config.to_string()).unwrap();
    };
    write(
        json!([{"name": "tool_use", "template": "TOOLS"}, {"name": "default", "template": "DEFAULT {{ bos_token }}"}]),
    );
    let template = ChatTemplate::from_directory(&directory).unwrap().unwrap();
    assert_eq!(
        template.render(&conversation(), GenerationPrompt::Add).unwrap(),
        "DEFAULT <s>"
    );

    write(json!([{"name": "tool_use", "template": "TOOLS"}, {"name": "rag", "template": "RAG"}]));
    let message = template_error(ChatTemplate::from_directory(&directory), "tokenizer_config.json");
    assert!(
        message.contains("no template named `default` (there are: tool_use, rag)"),
        "{message}"
    );
    write(json!([{"name": "default"}]));
    template_error(ChatTemplate::from_directory(&directory), "tokenizer_config.json");
    write(json!(42));
    template_error(ChatTemplate::from_directory(&directory), "tokenizer_config.json");
    write(json!("{% if %}"));
    let message = template_error(ChatTemplate::from_directory(&directory), "tokenizer_config.json");
    assert!(message.contains("syntax error"), "{message}");

    // No template anywhere: none, not an error.
    write(serde_json::Value::Null);
    assert!(ChatTemplate::from_directory(&directory).unwrap().is_none());
    std::fs::remove_file(directory.join("tokenizer_config.json")).unwrap();
    assert!(ChatTemplate::from_directory(&directory).unwrap().is_none());
    // A tokenizer_config.json that is not JSON is an error.
    std::fs::write(directory.join("tokenizer_config.json"), "{\"chat_template\": ").unwrap();
    let message = template_error(ChatTemplate::from_directory(&directory), "tokenizer_config.json");
    assert!(message.contains("not valid JSON"), "{message}");
    std::fs::remove_dir_all(directory).unwrap();
}

#[test]
fn generation_config_reads_eos_ids() {
    let directory = model_directory("generation");
    assert_eq!(
        GenerationConfig::from_directory(&directory).unwrap(),
        GenerationConfig::default()
    );
    let path = directory.join("generation_config.json");
    let mut random = SplitMix64::new(7);
    let ids: Vec<u32> = (0..3).map(|_| random.below(1 << 32) as u32).collect();

    std::fs::write(
        &path,
        json!({"bos_token_id": ids[0], "eos_token_id": ids[1], "do_sample": true}).to_string(),
    )
    .unwrap();
    let config = GenerationConfig::from_directory(&directory).unwrap();
    assert_eq!(
        config,
        GenerationConfig {
            eos_token_ids: vec![ids[1]],
            bos_token_id: Some(ids[0])
        }
    );

    std::fs::write(
        &path,
        json!({"eos_token_id": [ids[1], ids[2], u32::MAX, 0]}).to_string(),
    )
    .unwrap();
    let config = GenerationConfig::from_directory(&directory).unwrap();
    assert_eq!(config.eos_token_ids, vec![ids[1], ids[2], u32::MAX, 0]);
    assert_eq!(config.bos_token_id, None);

    std::fs::write(
        &path,
        json!({"eos_token_id": null, "bos_token_id": null}).to_string(),
    )
    .unwrap();
    assert_eq!(
        GenerationConfig::from_directory(&directory).unwrap(),
        GenerationConfig::default()
    );

    for (contents, field) in [
        (
            json!({"eos_token_id": -1}),
            "eos_token_id: the number -1 is not a token id",
        ),
        (
            json!({"eos_token_id": 4_294_967_296u64}),
            "eos_token_id: the number 4294967296 is not a token id",
        ),
        (
            json!({"eos_token_id": "2"}),
            "eos_token_id: the string \"2\" is not a token id",
        ),
        (json!({"eos_token_id": 2.5}), "eos_token_id: the number 2.5"),
        (
            json!({"eos_token_id": [1, "x"]}),
            "eos_token_id: the string \"x\"",
        ),
        (json!({"eos_token_id": [1, [2]]}), "eos_token_id: a list"),
        (json!({"eos_token_id": {"id": 2}}), "eos_token_id: an object"),
        (
            json!({"eos_token_id": 2, "bos_token_id": -5}),
            "bos_token_id: the number -5",
        ),
        (json!([2]), "expected a JSON object"),
    ] {
        std::fs::write(&path, contents.to_string()).unwrap();
        let error = GenerationConfig::from_directory(&directory).unwrap_err();
        assert!(matches!(error, ModelError::GenerationConfig { .. }), "{error:?}");
        let message = error.to_string();
        assert!(message.contains("generation_config.json: "), "{message}");
        assert!(message.contains(field), "{contents}: {message}");
    }
    std::fs::write(&path, "{\"eos_token_id\": [1,").unwrap();
    let message = GenerationConfig::from_directory(&directory)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("generation_config.json: not valid JSON"),
        "{message}"
    );
    assert!(message.contains("line 1"), "{message}");
    std::fs::remove_dir_all(directory).unwrap();
}
