//! `kscope kl` end to end on the CPU: a file against itself is at no
//! distance, quantized files are at a small positive one that grows as the
//! format loses bits, the same token sequence gives the same figures, and
//! bad input gets one line and a non-zero exit.

mod common;

use std::path::{Path, PathBuf};

use common::kscope;

/// A folder of this test's own, emptied first.
fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kscope-kl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes preset tiny-256 (seed 3, embeddings scaled so that logits are
/// spread as a trained model's) as a GGUF file of `quant` into `dir`.
fn gguf(dir: &Path, quant: &str) -> String {
    let path = dir.join(format!("tiny-{quant}.gguf"));
    let (code, _, stderr) = kscope(&[
        "gen-model",
        "--preset",
        "tiny-256",
        "--seed",
        "3",
        "--quant",
        quant,
        "--embedding-scale",
        "0.1",
        "--quiet",
        "--out",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    path.to_str().unwrap().to_string()
}

/// `kscope kl --json` of `model` against `reference`: the parsed figures.
fn kl(model: &str, reference: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "kl",
        "--model",
        model,
        "--reference",
        reference,
        "--device",
        "cpu",
        "--json",
    ];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = kscope(&args);
    assert_eq!(code, 0, "{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|error| panic!("{error}: {stdout}"))
}

/// `kscope kl` of `model` against `reference` on the CPU that must fail:
/// its stderr.
fn kl_refused(model: &str, reference: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "kl",
        "--model",
        model,
        "--reference",
        reference,
        "--device",
        "cpu",
    ];
    args.extend_from_slice(extra);
    let (code, _, stderr) = kscope(&args);
    assert_ne!(code, 0, "{stderr}");
    stderr
}

#[test]
fn kl_divergence_is_zero_for_a_file_against_itself_and_grows_with_coarser_formats() {
    let dir = folder("formats");
    let f32 = gguf(&dir, "f32");
    let q8 = gguf(&dir, "q8_0");
    let q4 = gguf(&dir, "q4_k_m");
    let tokens = ["--tokens", "48", "--seed", "11"];

    let same = kl(&f32, &f32, &tokens);
    assert_eq!(same["mean_kl"], 0.0);
    assert_eq!(same["max_kl"], 0.0);
    assert_eq!(same["same_top"], 1.0);
    assert_eq!(same["scored"], 48);

    let eight = kl(&q8, &f32, &tokens);
    let four = kl(&q4, &f32, &tokens);
    let mean = |figures: &serde_json::Value| figures["mean_kl"].as_f64().unwrap();
    assert!(mean(&eight) > 0.0, "{eight}");
    assert!(
        mean(&four) > 2.0 * mean(&eight),
        "Q4_K_M {four} against Q8_0 {eight}"
    );
    assert!(mean(&four) < 1.0, "{four}");
    let max = four["max_kl"].as_f64().unwrap();
    assert!(
        max >= four["kl_99"].as_f64().unwrap()
            && four["kl_99"].as_f64().unwrap() >= four["median_kl"].as_f64().unwrap()
    );
    assert!(max >= mean(&four));

    // The same sequence gives the same figures; scoring from a later
    // position scores fewer.
    assert_eq!(kl(&q4, &f32, &tokens), four);
    let later = kl(
        &q4,
        &f32,
        &["--tokens", "48", "--seed", "11", "--first-scored", "40"],
    );
    assert_eq!(later["scored"], 8);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn token_ids_from_a_file_are_the_sequence() {
    let dir = folder("ids");
    let f32 = gguf(&dir, "f32");
    let q8 = gguf(&dir, "q8_0");
    let ids = dir.join("ids.txt");
    std::fs::write(&ids, "[5, 200, 17, 3, 99, 250, 1, 64, 128, 7, 31, 255]\n").unwrap();
    let ids = ids.to_str().unwrap();
    let figures = kl(&q8, &f32, &["--token-ids", ids, "--tokens", "12"]);
    assert_eq!(figures["scored"], 12);
    assert!(figures["mean_kl"].as_f64().unwrap() > 0.0);

    // Too few ids, an id past the vocabulary, nothing left to score: one
    // line naming what is wrong.
    let stderr = kl_refused(&q8, &f32, &["--token-ids", ids]);
    assert!(
        stderr.contains("holds 12 ids") && stderr.contains("--tokens 512"),
        "{stderr}"
    );
    let outside = dir.join("outside.txt");
    std::fs::write(&outside, "1 2 3 4096").unwrap();
    let stderr = kl_refused(
        &q8,
        &f32,
        &["--token-ids", outside.to_str().unwrap(), "--tokens", "4"],
    );
    assert!(stderr.contains("id 4096 is outside the vocabulary"), "{stderr}");
    let stderr = kl_refused(&q8, &f32, &["--tokens", "8", "--first-scored", "8"]);
    assert!(stderr.contains("--first-scored 8 leaves no position"), "{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Sets every `stride`-th f32 of tensor `name` in GGUF file `path`, from
/// element `first`, to `value`.
fn poke_f32(path: &str, name: &str, first: usize, stride: usize, value: f32) {
    let (offset, len) = {
        let file = kernelscope_model::gguf::GgufFile::open(Path::new(path)).unwrap();
        let tensor = file.tensor(name).unwrap();
        (tensor.file_offset(), tensor.byte_len())
    };
    let mut bytes = std::fs::read(path).unwrap();
    for at in (offset + 4 * first..offset + len).step_by(4 * stride) {
        bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn non_finite_logits_on_either_side_are_refused_not_scored() {
    let dir = folder("non-finite");
    let clean = gguf(&dir, "f32");
    // One NaN in a down projection (every logit NaN after it), and a norm
    // weight of +inf every 7th element.
    let nan = dir.join("nan.gguf");
    std::fs::copy(&clean, &nan).unwrap();
    let nan = nan.to_str().unwrap().to_string();
    poke_f32(&nan, "blk.2.ffn_down.weight", 333, usize::MAX / 8, f32::NAN);
    let inf = dir.join("inf.gguf");
    std::fs::copy(&clean, &inf).unwrap();
    let inf = inf.to_str().unwrap().to_string();
    poke_f32(&inf, "blk.0.ffn_norm.weight", 3, 7, f32::INFINITY);
    for broken in [&nan, &inf] {
        for (model, reference, side) in [(broken, &clean, "model"), (&clean, broken, "reference")] {
            let stderr = kl_refused(model, reference, &["--tokens", "6", "--quiet"]);
            assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
            assert!(
                stderr.contains(&format!("{side}: position 0: the logits hold"))
                    && stderr.contains("non-finite")
                    && !stderr.contains("identical"),
                "{side} {broken}: {stderr}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_models_of_one_vocabulary_are_said_to_be_two() {
    let dir = folder("two-models");
    let reference = gguf(&dir, "f32");
    let quantized = gguf(&dir, "q8_0");
    let other = dir.join("tiny.gguf");
    common::gen_gguf("tiny", "f32", &other);
    let run = |model: &str| {
        kscope(&[
            "kl",
            "--model",
            model,
            "--reference",
            &reference,
            "--device",
            "cpu",
            "--tokens",
            "6",
            "--quiet",
            "--json",
        ])
    };
    let (code, stdout, stderr) = run(other.to_str().unwrap());
    assert_eq!(code, 0, "{stderr}");
    assert!(
        serde_json::from_str::<serde_json::Value>(&stdout).is_ok(),
        "{stdout}"
    );
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("warning:"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("two models of one vocabulary") && warnings[0].contains("4 layers"),
        "{stderr}"
    );
    // One model in two formats: no such word.
    let (code, _, stderr) = run(&quantized);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("warning:"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_ids_file_that_is_a_fifo_or_too_large_is_refused_before_any_model_loads() {
    let dir = folder("ids-files");
    let fifo = dir.join("ids.fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let big = dir.join("big.txt");
    std::fs::write(&big, "7 ".repeat(200_000)).unwrap();
    // The models named need not exist: the ids file is refused first.
    for (file, needle) in [(&fifo, "a FIFO"), (&big, "400000 bytes")] {
        let stderr = kl_refused(
            "no-such-model.gguf",
            "no-such-reference.gguf",
            &["--token-ids", file.to_str().unwrap()],
        );
        assert!(
            stderr.contains("--token-ids") && stderr.contains(needle),
            "{stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
