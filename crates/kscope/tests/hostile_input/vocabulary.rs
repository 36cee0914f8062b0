//! Vocabularies llama.cpp loads and kscope once refused: a token that is not
//! UTF-8, merges naming or making tokens the vocabulary does not hold, and
//! no merges at all. `--token-ids` needs no tokenizer, so each runs; text
//! loads what llama.cpp loads (with one warning line), and what cannot
//! tokenize at all is refused where text is needed, naming the key.

use std::path::Path;

use crate::common::kscope;
use crate::helpers::Scratch;

/// `gen-model`'s tiny GGUF with its bytes `old` replaced by `new` (of one length).
fn edited(dir: &Path, name: &str, old: &[u8], new: &[u8]) -> String {
    let clean = dir.join("clean.gguf");
    if !clean.exists() {
        crate::common::gen_gguf("tiny", "f32", &clean);
    }
    assert_eq!(old.len(), new.len());
    let mut bytes = std::fs::read(&clean).unwrap();
    let at = bytes
        .windows(old.len())
        .position(|window| window == old)
        .unwrap_or_else(|| panic!("{old:?} is not in the file"));
    bytes[at..at + old.len()].copy_from_slice(new);
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn vocabularies_llama_cpp_loads_run() {
    let scratch = Scratch::new("vocabularies");
    let dir = &scratch.0;
    // Merges are strings after their 8-byte length: "h e" is 3 bytes.
    let merge = |text: &[u8]| [&3u64.to_le_bytes()[..], text].concat();
    let cases = [
        (
            edited(
                dir,
                "utf8.gguf",
                b"<|reserved_special_token_33|>",
                b"\xff|reserved_special_token_33|>",
            ),
            "not UTF-8",
        ),
        (
            edited(dir, "merge-token.gguf", &merge(b"h e"), &merge(b"h \x01")),
            "merges",
        ),
        (
            edited(dir, "merge-result.gguf", &merge(b"h e"), &merge(b"h q")),
            "merges",
        ),
    ];
    for (file, warning) in &cases {
        for text in [&["--token-ids", "1,2,3"][..], &["--prompt", "hello there"]] {
            let mut args = vec!["run", "--model", file, "--device", "cpu", "--max-tokens", "2"];
            args.extend_from_slice(text);
            let (code, stdout, stderr) = kscope(&args);
            assert_eq!(code, 0, "{file} {text:?}: {stderr}");
            assert!(stdout.contains("text: \""), "{file}: the text decodes: {stdout}");
            let warnings: Vec<&str> = stderr
                .lines()
                .filter(|line| line.starts_with("warning:"))
                .collect();
            assert_eq!(warnings.len(), 1, "{file}: one warning line: {stderr}");
            assert!(warnings[0].contains(warning), "{file}: {stderr}");
        }
    }
    // No merges key at all: nothing can tokenize text, so --prompt is
    // refused naming the key, while token ids run and say the text is not decoded.
    let no_merges = edited(
        dir,
        "no-merges.gguf",
        b"tokenizer.ggml.merges",
        b"tokenizer.ggml.merget",
    );
    let (code, stdout, stderr) = kscope(&[
        "run",
        "--model",
        &no_merges,
        "--device",
        "cpu",
        "--token-ids",
        "1,2",
        "--max-tokens",
        "2",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("text: not decoded") && stdout.contains("tokenizer.ggml.merges"),
        "{stdout}"
    );
    scratch.refuses(
        &[
            "run",
            "--model",
            &no_merges,
            "--device",
            "cpu",
            "--prompt",
            "hi",
            "--max-tokens",
            "2",
        ],
        &["--prompt", "tokenizer.ggml.merges", "--token-ids"],
    );
}

#[test]
fn a_vocabulary_larger_than_memory_is_refused_before_it_is_read() {
    // Three million short tokens take 40 MB of file and, read and made a
    // tokenizer, over 400 MB of memory: under `ulimit -v` 300 MB the read
    // aborted ("memory allocation of N bytes failed"). Now the count is
    // weighed against the memory there is before a string is read.
    use kernelscope_model::gguf::{Array, GgufFile, GgufWriter, Value};
    let scratch = Scratch::new("vocabulary-memory");
    let clean = scratch.0.join("clean.gguf");
    crate::common::gen_gguf("tiny", "f32", &clean);
    let source = GgufFile::open(&clean).unwrap();
    let count = 3_000_000;
    let seed = u64::from(std::process::id());
    let path = scratch.0.join("huge-vocabulary.gguf");
    let mut writer = GgufWriter::new(&path);
    for (key, value) in source.metadata().iter() {
        let value = match key {
            "tokenizer.ggml.tokens" => Value::Array(Array::String(
                (0..count)
                    .map(|index| format!("t{:x}", index as u64 ^ seed))
                    .collect(),
            )),
            "tokenizer.ggml.scores" => {
                Value::Array(Array::F32((0..count).map(|index| -(index as f32)).collect()))
            }
            "tokenizer.ggml.token_type" => Value::Array(Array::I32(vec![1; count])),
            "general.alignment" => continue,
            _ => value.clone(),
        };
        writer.add_metadata(key, value).unwrap();
    }
    for tensor in source.tensors() {
        writer
            .add_tensor_info(tensor.name(), tensor.dims(), tensor.tensor_type())
            .unwrap();
    }
    let mut data = writer.write_header().unwrap();
    for tensor in source.tensors() {
        data.write_tensor(source.tensor_bytes(tensor)).unwrap();
    }
    data.finish().unwrap();
    for text in ["--token-ids 1,2", "--prompt hello"] {
        let output = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "ulimit -v 307200; exec {} run --model {} --max-tokens 1 {text}",
                crate::common::kscope_binary().display(),
                path.display()
            ))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{text}: {stderr}");
        assert!(
            stderr.starts_with("error: ")
                && stderr.contains("huge-vocabulary.gguf")
                && stderr.contains("`tokenizer.ggml.tokens`: 3000000 strings need about")
                && stderr.contains("MiB available"),
            "{text}: {stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "{text}: {stderr}");
    }
}
