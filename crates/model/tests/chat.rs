//! Chat templates rendered as transformers renders them, with a byte-level
//! BPE tokenizer made here: multi-turn conversations, generation prompts,
//! special tokens as single ids, streamed decoding of multi-byte text, the
//! EOS ids of generation_config.json, and every way a template can fail.

use std::path::{Path, PathBuf};

use kernelscope::rng::SplitMix64;
use kernelscope_model::synthetic::byte_level_tokenizer_json;
use kernelscope_model::{ChatMessage, ChatTemplate, GenerationConfig, TextStream, Tokenizer};

/// Qwen2's template, shortened: ChatML, a Python string method, and
/// raise_exception for a role it does not know.
const CHATML: &str = "{%- for message in messages %}\n\
    {%- if message['role'] not in ['system', 'user', 'assistant'] %}\n\
    {{- raise_exception('Unknown role: ' + message['role']) }}\n\
    {%- endif %}\n\
    {{- '<|im_start|>' + message['role'] + '\\n' + message['content'].strip() + '<|im_end|>' + '\\n' }}\n\
    {%- endfor %}\n\
    {%- if add_generation_prompt %}\n\
    {{- '<|im_start|>assistant\\n' }}\n\
    {%- endif %}\n";

/// Llama 3's shape: BOS from tokenizer_config, the trim filter.
const LLAMA3: &str = "{{- bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + \
    '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}\
    {{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

const SPECIAL: [&str; 6] = [
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
];

/// A folder removed on drop.
struct Folder(PathBuf);

impl Folder {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("kscope-chat-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Folder(path)
    }

    fn write(&self, name: &str, text: &str) -> &Self {
        std::fs::write(self.0.join(name), text).unwrap();
        self
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tokenizer_in(folder: &Folder) -> Tokenizer {
    let mut special = SPECIAL.to_vec();
    special.push("<|eot_id|>");
    folder.write(
        "tokenizer.json",
        &byte_level_tokenizer_json(&["h e", "l l", "he ll", "Ġ t", "i m", "Ġ a"], &special),
    );
    Tokenizer::from_directory(folder.path())
        .unwrap()
        .expect("tokenizer.json")
}

fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::new("system", "You are terse."),
        ChatMessage::new("user", "  hello there \n"),
        ChatMessage::new("assistant", "Hi."),
        ChatMessage::new("user", "Name a prime: 🦀 or 素数?"),
    ]
}

#[test]
fn multi_turn_chatml_renders_exactly() {
    let folder = Folder::new("chatml");
    folder.write(
        "tokenizer_config.json",
        &serde_json::json!({"chat_template": CHATML, "eos_token": "<|im_end|>"}).to_string(),
    );
    let template = ChatTemplate::from_directory(folder.path())
        .unwrap()
        .expect("a template");
    let rendered = template.render(&conversation(), true).unwrap();
    assert_eq!(
        rendered,
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nhello there<|im_end|>\n\
         <|im_start|>assistant\nHi.<|im_end|>\n<|im_start|>user\nName a prime: 🦀 or 素数?<|im_end|>\n\
         <|im_start|>assistant\n"
    );
    let without = template.render(&conversation(), false).unwrap();
    assert_eq!(format!("{without}<|im_start|>assistant\n"), rendered);
}

#[test]
fn llama3_style_template_uses_the_bos_token_of_tokenizer_config() {
    let folder = Folder::new("llama3");
    // transformers writes special tokens as AddedToken objects too.
    folder.write(
        "tokenizer_config.json",
        &serde_json::json!({
            "chat_template": LLAMA3,
            "bos_token": {"content": "<|begin_of_text|>", "special": true},
            "eos_token": "<|eot_id|>",
        })
        .to_string(),
    );
    let template = ChatTemplate::from_directory(folder.path()).unwrap().unwrap();
    let rendered = template
        .render(&[ChatMessage::new("user", " hi ")], true)
        .unwrap();
    assert_eq!(
        rendered,
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    // The rendered text holds BOS: encoding adds nothing, and every special
    // token is one id, not split into bytes.
    let tokenizer = tokenizer_in(&folder);
    let ids = tokenizer.encode_without_special_tokens(&rendered).unwrap();
    let bos = tokenizer.token_id("<|begin_of_text|>").unwrap();
    let header = tokenizer.token_id("<|start_header_id|>").unwrap();
    assert_eq!(ids[0], bos);
    assert_eq!(ids[1], header);
    assert_eq!(ids.iter().filter(|&&id| id == header).count(), 2);
    assert_eq!(tokenizer.decode(&ids).unwrap(), "user\n\nhiassistant\n\n");
}

#[test]
fn template_files_take_precedence_and_named_lists_pick_default() {
    let folder = Folder::new("sources");
    folder.write(
        "tokenizer_config.json",
        &serde_json::json!({"chat_template": [
            {"name": "tool_use", "template": "TOOLS"},
            {"name": "default", "template": "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"},
        ]})
        .to_string(),
    );
    let template = ChatTemplate::from_directory(folder.path()).unwrap().unwrap();
    assert_eq!(
        template.render(&[ChatMessage::new("user", "x")], false).unwrap(),
        "[user:x]"
    );
    folder.write("chat_template.jinja", "{{ messages | length }} messages");
    let template = ChatTemplate::from_directory(folder.path()).unwrap().unwrap();
    assert!(template.path().ends_with("chat_template.jinja"));
    assert_eq!(template.render(&conversation(), false).unwrap(), "4 messages");
    // No template anywhere: None, not an error.
    let empty = Folder::new("none");
    empty.write("tokenizer_config.json", "{\"eos_token\": \"</s>\"}");
    assert!(ChatTemplate::from_directory(empty.path()).unwrap().is_none());
}

#[test]
fn template_failures_are_one_line_naming_the_file() {
    let folder = Folder::new("failures");
    let render = |source: &str, messages: &[ChatMessage]| {
        folder.write("chat_template.jinja", source);
        let template = ChatTemplate::from_directory(folder.path()).unwrap().unwrap();
        template.render(messages, true).unwrap_err().to_string()
    };
    let user = [ChatMessage::new("user", "x")];
    let syntax = render("{% for m in messages %}{{ m.content }", &user);
    assert!(
        syntax.contains("chat_template.jinja") && syntax.contains("does not parse"),
        "{syntax}"
    );
    let unknown_role = render(CHATML, &[ChatMessage::new("tool", "x")]);
    assert!(unknown_role.contains("Unknown role: tool"), "{unknown_role}");
    // A loop of 8.1e9 steps runs out of fuel instead of hanging.
    let endless = render(
        "{% for i in range(90000) %}{% for j in range(90000) %}.{% endfor %}{% endfor %}",
        &user,
    );
    assert!(
        endless.contains("chat_template.jinja") && endless.contains("fuel"),
        "{endless}"
    );
    let strftime = render("{{ strftime_now('%A') }}", &user);
    assert!(
        strftime.contains("%A") && strftime.contains("not supported"),
        "{strftime}"
    );
    for error in [&syntax, &unknown_role, &endless, &strftime] {
        assert!(!error.contains('\n'), "one line: {error}");
    }
    // A date the way Llama 3.1 asks for it.
    folder.write("chat_template.jinja", "{{ strftime_now('%d %b %Y') }}");
    let date = ChatTemplate::from_directory(folder.path())
        .unwrap()
        .unwrap()
        .render(&user, false)
        .unwrap();
    assert_eq!(date.len(), 11, "{date}");
    // chat_template that is neither a string nor a list.
    let other = Folder::new("bad-config");
    other.write("tokenizer_config.json", "{\"chat_template\": 7}");
    let error = ChatTemplate::from_directory(other.path())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("tokenizer_config.json") && error.contains("chat_template"),
        "{error}"
    );
}

#[test]
fn streamed_decoding_reproduces_random_multibyte_text() {
    let folder = Folder::new("stream");
    let tokenizer = tokenizer_in(&folder);
    let pieces = [
        "hello",
        " ",
        "tim",
        "🦀",
        "素数",
        "é",
        "ñ",
        "\n",
        "a",
        "ll",
        "Ω",
        "👩‍🔬",
        "ß",
    ];
    let mut rng = SplitMix64::new(31);
    for _ in 0..25 {
        let length = 1 + rng.below(30) as usize;
        let text: String = (0..length)
            .map(|_| pieces[rng.below(pieces.len() as u64) as usize])
            .collect();
        let ids = tokenizer.encode_without_special_tokens(&text).unwrap();
        // Byte-level: multi-byte characters span several ids.
        assert!(
            ids.len() >= text.chars().count().min(2) || text.len() < 2,
            "{text:?}: {ids:?}"
        );
        let mut stream = TextStream::new(&tokenizer);
        let mut streamed = String::new();
        for &id in &ids {
            let piece = stream.push(id).unwrap();
            assert!(
                !piece.contains('\u{FFFD}'),
                "{text:?}: a partial character was emitted: {piece:?}"
            );
            streamed.push_str(&piece);
        }
        streamed.push_str(&stream.finish().unwrap());
        assert_eq!(streamed, text);
    }
}

#[test]
fn generation_config_eos_ids_are_read_and_checked() {
    let path = Path::new("generation_config.json");
    let one = GenerationConfig::from_json(br#"{"eos_token_id": 128001}"#, path).unwrap();
    assert_eq!(one.eos_token_ids, [128_001]);
    let list = GenerationConfig::from_json(
        br#"{"eos_token_id": [128001, 128008, 128009], "do_sample": true}"#,
        path,
    )
    .unwrap();
    assert_eq!(list.eos_token_ids, [128_001, 128_008, 128_009]);
    assert!(
        GenerationConfig::from_json(b"{}", path)
            .unwrap()
            .eos_token_ids
            .is_empty()
    );
    for bad in [
        &br#"{"eos_token_id": -1}"#[..],
        br#"{"eos_token_id": 4294967296}"#,
        br#"{"eos_token_id": ["2"]}"#,
        b"[1,",
    ] {
        let error = GenerationConfig::from_json(bad, path).unwrap_err().to_string();
        assert!(error.contains("generation_config.json"), "{error}");
    }
    let folder = Folder::new("generation");
    assert!(
        GenerationConfig::from_directory(folder.path())
            .unwrap()
            .eos_token_ids
            .is_empty()
    );
    folder.write("generation_config.json", r#"{"eos_token_id": [7, 9]}"#);
    assert_eq!(
        GenerationConfig::from_directory(folder.path())
            .unwrap()
            .eos_token_ids,
        [7, 9]
    );
}
