//! `kscope run --chat` with a tokenizer and template made here, and
//! `--model org/name` from a Hugging Face cache built here (offline).

mod common;

use std::path::{Path, PathBuf};

use common::{gen_model, kscope, kscope_with};
use kernelscope_model::synthetic::byte_level_tokenizer_json;
use kernelscope_model::{ChatMessage, ChatTemplate, GenerationPrompt, Tokenizer};

const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + \
    message['content'].strip() + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}\
    {{ '<|im_start|>assistant\\n' }}{% endif %}";

/// A tiny checkpoint with a byte-level tokenizer (ids below its vocabulary
/// of 2048) and a ChatML template, in its own folder, removed on drop.
struct ChatModel(PathBuf);

impl ChatModel {
    fn new(name: &str) -> Self {
        let root = std::env::temp_dir().join(format!("kscope-chat-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let model = root.join("model");
        gen_model("tiny", 8, &model);
        std::fs::write(
            model.join("tokenizer.json"),
            byte_level_tokenizer_json(
                &["h e", "l l", "Ġ t"],
                &["<|im_start|>", "<|im_end|>", "<|endoftext|>"],
            ),
        )
        .unwrap();
        std::fs::write(
            model.join("tokenizer_config.json"),
            serde_json::json!({"chat_template": CHATML, "eos_token": "<|im_end|>"}).to_string(),
        )
        .unwrap();
        ChatModel(root)
    }

    fn model(&self) -> PathBuf {
        self.0.join("model")
    }

    fn arg(&self) -> String {
        self.model().to_str().unwrap().to_string()
    }
}

impl Drop for ChatModel {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn prompt_line(stdout: &str) -> &str {
    stdout
        .lines()
        .find(|line| line.starts_with("prompt: "))
        .expect("a prompt line")
}

#[test]
fn a_multi_turn_chat_is_rendered_encoded_and_streamed() {
    let chat = ChatModel::new("turns");
    let model = chat.arg();
    let turns = ["What is 2+2?", "4.", "And 🦀 in Chinese?"];
    let (code, stdout, stderr) = kscope(&[
        "run",
        "--model",
        &model,
        "--quiet",
        "--max-tokens",
        "6",
        "--system",
        "Be brief.",
        "--chat",
        turns[0],
        "--chat",
        turns[1],
        "--chat",
        turns[2],
    ]);
    assert_eq!(code, 0, "{stderr}");
    // The prompt is the template's rendering, encoded without added tokens.
    let template = ChatTemplate::from_directory(&chat.model()).unwrap().unwrap();
    let messages = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", turns[0]),
        ChatMessage::new("assistant", turns[1]),
        ChatMessage::new("user", turns[2]),
    ];
    let rendered = template.render(&messages, GenerationPrompt::Add).unwrap();
    let tokenizer = Tokenizer::from_directory(&chat.model()).unwrap().unwrap();
    let ids = tokenizer.encode_without_special_tokens(&rendered).unwrap();
    assert_eq!(
        prompt_line(&stdout),
        format!("prompt: {} tokens {:?}", ids.len(), ids)
    );
    let im_start = tokenizer.token_id("<|im_start|>").unwrap();
    assert_eq!(
        ids.iter().filter(|&&id| id == im_start).count(),
        5,
        "four turns and the generation prompt"
    );
    assert!(stdout.contains("assistant: "), "{stdout}");
    assert!(stdout.contains("generated: 6 tokens"), "{stdout}");
}

#[test]
fn generation_config_eos_ids_stop_the_reply() {
    let chat = ChatModel::new("eos");
    let model = chat.arg();
    let (code, stdout, stderr) = kscope(&[
        "run",
        "--model",
        &model,
        "--quiet",
        "--max-tokens",
        "6",
        "--chat",
        "hi",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("generated: 6 tokens"), "{stdout}");
    // Every id is an end of sequence: the first token stops it.
    let every_id: Vec<u32> = (0..2048).collect();
    std::fs::write(
        chat.model().join("generation_config.json"),
        serde_json::json!({"eos_token_id": every_id}).to_string(),
    )
    .unwrap();
    let (code, stdout, stderr) = kscope(&[
        "run",
        "--model",
        &model,
        "--quiet",
        "--max-tokens",
        "6",
        "--chat",
        "hi",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("generated: 1 tokens"), "{stdout}");
    assert!(stdout.contains("stopped at an end-of-sequence token"), "{stdout}");
    // An id past the vocabulary is named, not ignored.
    std::fs::write(
        chat.model().join("generation_config.json"),
        "{\"eos_token_id\": [2, 5000]}",
    )
    .unwrap();
    let (code, _, stderr) = kscope(&["run", "--model", &model, "--quiet", "--chat", "hi"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("generation_config.json") && stderr.contains("5000"),
        "{stderr}"
    );
}

#[test]
fn chat_refuses_what_it_cannot_render() {
    let chat = ChatModel::new("refusals");
    let model = chat.arg();
    let (code, _, stderr) = kscope(&["run", "--model", &model, "--chat", "a", "--chat", "b"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--chat was given 2 times"), "{stderr}");
    let (code, _, stderr) = kscope(&["run", "--chat", "hi"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("--chat needs a tokenizer and a chat template"),
        "{stderr}"
    );
    std::fs::write(chat.model().join("tokenizer_config.json"), "{}").unwrap();
    let (code, _, stderr) = kscope(&["run", "--model", &model, "--chat", "hi"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no chat template"), "{stderr}");
    std::fs::write(
        chat.model().join("chat_template.jinja"),
        "{{ raise_exception('no tools here') }}",
    )
    .unwrap();
    let (code, _, stderr) = kscope(&["run", "--model", &model, "--chat", "hi"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("chat_template.jinja") && stderr.contains("no tools here"),
        "{stderr}"
    );
}

#[test]
fn a_template_that_grows_a_string_without_writing_it_is_refused_naming_its_file() {
    // Doubling a string thirty times takes a few hundred instructions (the
    // fuel cannot see it) and writes nothing (nor can the output bound);
    // under `ulimit -v` 4 GiB it aborted kscope allocating 2 GiB.
    let chat = ChatModel::new("runaway");
    let model = chat.arg();
    let doubling = "{% set ns = namespace(text='ab' * 1000) %}{% for i in range(40) %}\
        {% set ns.text = ns.text ~ ns.text %}{% endfor %}{{ ns.text | length }}";
    let repeating = "{% set ns = namespace(text='x' * 100000000) %}{% for i in range(40) %}\
        {% set ns.text = ns.text + ns.text %}{% endfor %}{{ ns.text[:10] }}";
    for template in [doubling, repeating] {
        std::fs::write(chat.model().join("chat_template.jinja"), template).unwrap();
        let output = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "ulimit -v 4194304; exec {} run --model {model} --quiet --max-tokens 1 --chat hi",
                common::kscope_binary().display()
            ))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.starts_with("error: the chat template of")
                && stderr.contains("chat_template.jinja")
                && stderr.contains("MiB while rendering")
                && !stderr.contains("memory allocation of"),
            "{stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
}

#[test]
fn org_name_runs_from_the_hugging_face_cache() {
    let chat = ChatModel::new("hub");
    let cache = chat.0.join("hub");
    let repository = cache.join("models--test-org--tiny-chat");
    let commit = "4f1c2a9e0b7d8c6f5e4d3c2b1a0f9e8d7c6b5a49";
    let snapshot = repository.join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repository.join("blobs")).unwrap();
    std::fs::create_dir_all(repository.join("refs")).unwrap();
    std::fs::write(repository.join("refs/main"), commit).unwrap();
    // As huggingface_hub lays it out: snapshot files link into blobs/.
    for (index, entry) in std::fs::read_dir(chat.model()).unwrap().enumerate() {
        let entry = entry.unwrap();
        let blob = format!("blob{index}");
        std::fs::copy(entry.path(), repository.join("blobs").join(&blob)).unwrap();
        std::os::unix::fs::symlink(
            Path::new("../../blobs").join(&blob),
            snapshot.join(entry.file_name()),
        )
        .unwrap();
    }
    let environment = [("HF_HUB_CACHE", cache.as_path())];
    let (code, stdout, stderr) = kscope_with(
        &[
            "run",
            "--model",
            "test-org/tiny-chat",
            "--quiet",
            "--max-tokens",
            "3",
            "--chat",
            "hello",
        ],
        &environment,
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("generated: 3 tokens") && stdout.contains(commit),
        "{stdout}"
    );
    let (code, _, stderr) = kscope_with(
        &[
            "run",
            "--model",
            "test-org/tiny-chat",
            "--revision",
            commit,
            "--max-tokens",
            "2",
        ],
        &environment,
    );
    assert_eq!(code, 0, "{stderr}");
    // Not cached: the command that downloads it.
    let (code, _, stderr) = kscope_with(
        &["run", "--model", "test-org/other", "--revision", "v1"],
        &environment,
    );
    assert_eq!(code, 2);
    assert!(
        stderr.contains("hf download test-org/other --revision v1"),
        "{stderr}"
    );
    // Outputs never land on the cache's files (the blobs behind the links).
    let weights = snapshot.join("model.safetensors");
    let (code, _, stderr) = kscope_with(
        &[
            "run",
            "--model",
            "test-org/tiny-chat",
            "--force",
            "--logits-out",
            weights.to_str().unwrap(),
        ],
        &environment,
    );
    assert_eq!(code, 2);
    assert!(stderr.contains("model directory"), "{stderr}");
    // --revision is for ORG/NAME only.
    let (code, _, stderr) = kscope(&["run", "--model", &chat.arg(), "--revision", "main"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--revision"), "{stderr}");
}

#[test]
fn gguf_repositories_in_the_cache_run_the_file_asked_for() {
    let root = std::env::temp_dir().join(format!("kscope-gguf-hub-{}", std::process::id()));
    let cache = root.join("hub");
    let repository = cache.join("models--test-org--tiny-GGUF");
    let commit = "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567";
    let snapshot = repository.join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repository.join("refs")).unwrap();
    std::fs::write(repository.join("refs/main"), commit).unwrap();
    let write = |quant: &str| {
        common::gen_gguf("tiny", quant, &snapshot.join(format!("tiny-{quant}.gguf")));
    };
    let environment = [("HF_HUB_CACHE", cache.as_path())];
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--model",
            "test-org/tiny-GGUF",
            "--quiet",
            "--max-tokens",
            "2",
            "--device",
            "cpu",
        ];
        args.extend_from_slice(extra);
        kscope_with(&args, &environment)
    };
    // The one GGUF file of a repository runs without naming it.
    write("q8_0");
    let (code, stdout, stderr) = run(&[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("tiny-q8_0.gguf (Q8_0:"), "{stdout}");
    // Two: refused, both named; --gguf picks one.
    write("q4_0");
    let (code, _, stderr) = run(&[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("tiny-q4_0.gguf") && stderr.contains("tiny-q8_0.gguf") && stderr.contains("--gguf"),
        "{stderr}"
    );
    let (code, stdout, stderr) = run(&["--gguf", "tiny-q4_0.gguf", "--prompt", "hello"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("tiny-q4_0.gguf (Q4_0:") && stdout.contains("text: "),
        "{stdout}"
    );
    // Nothing outside the repository, nothing that is not there.
    for (name, needle) in [
        ("../x.gguf", "inside the repository"),
        ("missing.gguf", "no such file"),
    ] {
        let (code, _, stderr) = run(&["--gguf", name]);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(needle), "{stderr}");
    }
    std::fs::remove_dir_all(&root).unwrap();
}
