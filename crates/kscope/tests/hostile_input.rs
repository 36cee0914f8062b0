//! Hostile and malformed input, one test per class: configs whose numbers
//! would reach the math broken, fields the engine does not implement,
//! checkpoints that point outside their directory or at FIFOs, and output
//! flags aimed at files that exist. Each case asserts exit 2, one line on
//! stderr naming the file, flag or field, and that no file changed.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{gen_model, kscope, kscope_binary};
use serde_json::{Value, json};

/// A scratch folder with a fresh tiny checkpoint in `model/`, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let root = std::env::temp_dir().join(format!("kscope-hostile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        gen_model("tiny", 21, &root.join("model"));
        Scratch(root)
    }

    fn model(&self) -> PathBuf {
        self.0.join("model")
    }

    fn model_arg(&self) -> String {
        self.model().to_str().unwrap().to_string()
    }

    fn config(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.model().join("config.json")).unwrap()).unwrap()
    }

    fn set_config(&self, config: &Value) {
        std::fs::write(
            self.model().join("config.json"),
            serde_json::to_string_pretty(config).unwrap(),
        )
        .unwrap();
    }

    /// Sets (or with `Value::Null`... as given) one top-level field.
    fn with_field(&self, field: &str, value: Value) {
        let mut config = self.config();
        config[field] = value;
        self.set_config(&config);
    }

    fn without_field(&self, field: &str) {
        let mut config = self.config();
        config.as_object_mut().unwrap().remove(field);
        self.set_config(&config);
    }

    /// Every regular file under the scratch folder with its bytes (FIFOs and
    /// other special files by kind only: reading one would block).
    fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut files = BTreeMap::new();
        let mut pending = vec![self.0.clone()];
        while let Some(folder) = pending.pop() {
            for entry in std::fs::read_dir(&folder).unwrap() {
                let path = entry.unwrap().path();
                let metadata = std::fs::symlink_metadata(&path).unwrap();
                if metadata.is_dir() {
                    pending.push(path);
                } else if metadata.is_file() {
                    files.insert(path.clone(), std::fs::read(&path).unwrap());
                } else {
                    files.insert(path.clone(), format!("{:?}", metadata.file_type()).into_bytes());
                }
            }
        }
        files
    }

    /// Runs kscope and expects exit 2, one line holding every needle, and
    /// not one byte changed under the scratch folder.
    fn refuses(&self, args: &[&str], needles: &[&str]) {
        let before = self.snapshot();
        refused(args, needles);
        let after = self.snapshot();
        assert_eq!(
            before.keys().collect::<Vec<_>>(),
            after.keys().collect::<Vec<_>>(),
            "files appeared or vanished: {args:?}"
        );
        for (path, bytes) in &before {
            assert!(&after[path] == bytes, "{} changed: {args:?}", path.display());
        }
    }

    /// `kscope run --model DIR` with a few tokens, refused.
    fn run_refuses(&self, needles: &[&str]) {
        let model = self.model_arg();
        self.refuses(
            &["run", "--model", &model, "--max-tokens", "2", "--quiet"],
            needles,
        );
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs kscope and expects exit 2 and one `error:` line holding every needle.
fn refused(args: &[&str], needles: &[&str]) {
    let (code, stdout, stderr) = kscope(args);
    assert_eq!(code, 2, "args {args:?}\nstdout: {stdout}\nstderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "{args:?}: missing `{needle}` in: {stderr}"
        );
    }
}

fn make_fifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo exists");
    assert!(status.success());
}

#[test]
fn numbers_that_would_break_the_math_are_refused() {
    let scratch = Scratch::new("numbers");
    let original = scratch.config();
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        ("rope_theta", json!(0), vec!["rope_theta", "positive"]),
        ("rope_theta", json!(-500000.0), vec!["rope_theta", "positive"]),
        ("rope_theta", json!(1e300), vec!["rope_theta", "f32 range"]),
        ("rms_norm_eps", json!(-1e-5), vec!["rms_norm_eps", "positive"]),
        ("rms_norm_eps", json!(0.0), vec!["rms_norm_eps", "positive"]),
        ("rms_norm_eps", json!(1e-60), vec!["rms_norm_eps", "f32 range"]),
        (
            "eos_token_id",
            json!(4_294_967_298u64),
            vec!["eos_token_id", "vocab_size"],
        ),
        ("eos_token_id", json!([2, -1]), vec!["eos_token_id", "-1"]),
        ("eos_token_id", json!("two"), vec!["eos_token_id", "\"two\""]),
        (
            "eos_token_id",
            json!(2048),
            vec!["eos_token_id", "vocab_size (2048)"],
        ),
        (
            "num_hidden_layers",
            json!(1_000_000_000u64),
            vec!["num_hidden_layers", "4096"],
        ),
        ("num_hidden_layers", json!(0), vec!["num_hidden_layers", "1..="]),
        ("vocab_size", json!(2048.5), vec!["vocab_size", "whole number"]),
        ("hidden_size", json!(1u64 << 40), vec!["hidden_size", "1..="]),
        (
            "num_key_value_heads",
            json!(3),
            vec!["num_key_value_heads", "multiple"],
        ),
        ("head_dim", json!(31), vec!["head_dim", "even"]),
        (
            "tie_word_embeddings",
            json!("yes"),
            vec!["tie_word_embeddings", "true or false"],
        ),
    ];
    for (field, value, needles) in cases {
        scratch.set_config(&original);
        scratch.with_field(field, value.clone());
        eprintln!("{field} = {value}");
        scratch.run_refuses(&[&["config.json"], needles.as_slice()].concat());
    }
    scratch.set_config(&original);
    scratch.without_field("hidden_size");
    scratch.run_refuses(&["config.json", "`hidden_size` is missing"]);
}

#[test]
fn unimplemented_math_is_refused_by_name() {
    let scratch = Scratch::new("unimplemented");
    let original = scratch.config();
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "rope_scaling",
            json!({"factor": 2.0}),
            vec!["rope_scaling", "rope_type"],
        ),
        (
            "rope_scaling",
            json!({"type": "dynamic", "factor": 2.0}),
            vec!["dynamic", "not implemented"],
        ),
        (
            "rope_scaling",
            json!({"rope_type": "su"}),
            vec!["unknown rope type `su`"],
        ),
        (
            "rope_parameters",
            json!({"rope_type": "longrope", "rope_theta": 10000.0}),
            vec!["longrope", "rope_parameters.rope_type"],
        ),
        (
            "rope_parameters",
            json!({"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 4.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
            vec!["rope_parameters.high_freq_factor", "greater than"],
        ),
        (
            "rope_parameters",
            json!({"rope_type": "linear", "rope_theta": 10000.0}),
            vec!["rope_parameters.factor", "missing"],
        ),
        ("hidden_act", json!("gelu"), vec!["hidden_act", "gelu"]),
        ("mlp_bias", json!(true), vec!["mlp_bias"]),
        ("partial_rotary_factor", json!(0.5), vec!["partial_rotary_factor"]),
        (
            "quantization_config",
            json!({"quant_method": "gptq"}),
            vec!["quantization_config"],
        ),
        (
            "attn_logit_softcapping",
            json!(50.0),
            vec!["attn_logit_softcapping"],
        ),
        (
            "model_type",
            json!("qwen2"),
            vec!["model_type", "LlamaForCausalLM"],
        ),
        (
            "layer_types",
            json!([
                "full_attention",
                "chunked_attention",
                "full_attention",
                "full_attention"
            ]),
            vec!["layer_types", "chunked_attention"],
        ),
        ("architectures", json!("LlamaForCausalLM"), vec!["architectures"]),
        (
            "architectures",
            json!(["GPT2LMHeadModel"]),
            vec!["GPT2LMHeadModel", "not supported"],
        ),
    ];
    for (field, value, needles) in cases {
        scratch.set_config(&original);
        scratch.with_field(field, value.clone());
        eprintln!("{field} = {value}");
        scratch.run_refuses(&[&["config.json"], needles.as_slice()].concat());
    }
}

#[test]
fn layouts_that_disagree_are_refused() {
    let scratch = Scratch::new("layouts");
    let original = scratch.config();
    // rope_parameters (transformers 5) against rope_theta (older).
    scratch.with_field(
        "rope_parameters",
        json!({"rope_type": "default", "rope_theta": 500000.0}),
    );
    scratch.run_refuses(&[
        "config.json",
        "`rope_theta` (10000)",
        "rope_parameters.rope_theta` (500000)",
        "disagree",
    ]);
    scratch.set_config(&original);
    scratch.with_field(
        "rope_parameters",
        json!({"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}),
    );
    scratch.with_field("rope_scaling", json!({"type": "linear", "factor": 4.0}));
    scratch.run_refuses(&["config.json", "`rope_scaling`", "`rope_parameters`", "disagree"]);
    scratch.set_config(&original);
    scratch.with_field("dtype", json!("float16"));
    scratch.run_refuses(&["config.json", "`dtype` (`float16`)", "`torch_dtype` (`bfloat16`)"]);
    // Agreeing restatements are fine: both layouts, same values.
    scratch.set_config(&original);
    scratch.with_field(
        "rope_parameters",
        json!({"rope_type": "default", "rope_theta": 10000.0}),
    );
    scratch.with_field("dtype", json!("bfloat16"));
    let model = scratch.model_arg();
    let (code, _, stderr) = kscope(&["run", "--model", &model, "--max-tokens", "2", "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn a_sliding_window_limits_the_context() {
    let scratch = Scratch::new("sliding");
    let mut config = scratch.config();
    config["architectures"] = json!(["MistralForCausalLM"]);
    config["model_type"] = json!("mistral");
    config["sliding_window"] = json!(8);
    scratch.set_config(&config);
    let model = scratch.model_arg();
    // Within the window it runs, and says where the context stops.
    let (code, stdout, stderr) = kscope(&["run", "--model", &model, "--max-tokens", "4", "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("sliding-window attention (window 8) is not implemented"),
        "{stdout}"
    );
    scratch.refuses(
        &["run", "--model", &model, "--max-tokens", "6", "--quiet"],
        &["context length of 8 positions", "sliding_window = 8"],
    );
}

#[test]
fn config_files_that_are_not_config_files_are_refused() {
    let scratch = Scratch::new("config-files");
    let config = scratch.model().join("config.json");
    std::fs::write(&config, "[1, 2, 3]").unwrap();
    scratch.run_refuses(&["config.json", "JSON object"]);
    std::fs::write(&config, "{\"architectures\": [\"LlamaForCausalLM\"], ").unwrap();
    scratch.run_refuses(&["config.json", "malformed"]);
    std::fs::remove_file(&config).unwrap();
    std::fs::create_dir(&config).unwrap();
    scratch.run_refuses(&["config.json", "a directory, not a regular file"]);
    std::fs::remove_dir(&config).unwrap();
    make_fifo(&config);
    // Would block forever if opened: it must be refused by its kind.
    scratch.run_refuses(&["config.json", "a FIFO, not a regular file"]);
}

#[test]
fn absurd_context_is_refused_before_allocating() {
    let scratch = Scratch::new("context");
    // Positions are u32 on the device: a context past 2^31 is refused by name.
    scratch.with_field("max_position_embeddings", json!(1_000_000_000_000_000u64));
    scratch.run_refuses(&["config.json", "max_position_embeddings"]);
    scratch.with_field("max_position_embeddings", json!(2_000_000_000u64));
    let model = scratch.model_arg();
    // Within the declared context, far beyond any memory (4 TB of KV cache).
    scratch.refuses(
        &["run", "--model", &model, "--max-tokens", "1999999000", "--quiet"],
        &["KV cache", "MiB", "free", "--max-tokens"],
    );
}

#[test]
fn weights_must_be_regular_files_inside_the_model_directory() {
    let scratch = Scratch::new("shards");
    let model = scratch.model();
    let weights = model.join("model.safetensors");
    let moved = scratch.0.join("elsewhere.safetensors");
    std::fs::rename(&weights, &moved).unwrap();

    // A symlink out of the model directory.
    std::os::unix::fs::symlink(&moved, &weights).unwrap();
    scratch.run_refuses(&["model.safetensors", "outside"]);
    std::fs::remove_file(&weights).unwrap();

    // A FIFO or a directory where the weights should be.
    make_fifo(&weights);
    scratch.run_refuses(&["model.safetensors", "a FIFO"]);
    std::fs::remove_file(&weights).unwrap();
    std::fs::create_dir(&weights).unwrap();
    scratch.run_refuses(&["model.safetensors", "a directory"]);
    std::fs::remove_dir(&weights).unwrap();

    // An index whose shards escape, are not named by strings, or are FIFOs.
    std::fs::copy(&moved, model.join("model-00001-of-00001.safetensors")).unwrap();
    let index = model.join("model.safetensors.index.json");
    let write_index = |file: Value| {
        let text = json!({"metadata": {}, "weight_map": {"model.embed_tokens.weight": file}});
        std::fs::write(&index, text.to_string()).unwrap();
    };
    write_index(json!("../elsewhere.safetensors"));
    scratch.run_refuses(&["model.safetensors.index.json", "`..`"]);
    write_index(json!("/etc/passwd"));
    scratch.run_refuses(&["model.safetensors.index.json", "/etc/passwd", "absolute"]);
    write_index(json!(7));
    scratch.run_refuses(&[
        "model.safetensors.index.json",
        "model.embed_tokens.weight",
        "string",
    ]);
    make_fifo(&model.join("shard.safetensors"));
    write_index(json!("shard.safetensors"));
    scratch.run_refuses(&["shard.safetensors", "a FIFO"]);
    std::fs::remove_file(model.join("shard.safetensors")).unwrap();

    // Two shards that both hold every tensor: refused, not resolved by order.
    std::fs::copy(&moved, model.join("model-00002-of-00002.safetensors")).unwrap();
    let text = json!({"weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00001.safetensors",
        "model.norm.weight": "model-00002-of-00002.safetensors"}});
    std::fs::write(&index, text.to_string()).unwrap();
    scratch.run_refuses(&["tensor `", "is also in", "refusing to pick"]);
}

#[test]
fn output_flags_never_overwrite_without_force() {
    let scratch = Scratch::new("outputs");
    let model = scratch.model_arg();
    let existing = scratch.0.join("existing.out");
    std::fs::write(&existing, "keep me").unwrap();
    let target = existing.to_str().unwrap();
    for flag in ["--logits-out", "--profile-json", "--trace"] {
        scratch.refuses(
            &[
                "run",
                "--model",
                &model,
                "--max-tokens",
                "2",
                "--quiet",
                flag,
                target,
            ],
            &[flag, "existing.out", "exists", "--force"],
        );
    }
    // The model's own files, even with --force.
    let weights = scratch.model().join("model.safetensors");
    for flag in ["--logits-out", "--profile-json", "--trace"] {
        scratch.refuses(
            &[
                "run",
                "--model",
                &model,
                "--max-tokens",
                "2",
                "--quiet",
                "--force",
                flag,
                weights.to_str().unwrap(),
            ],
            &[flag, "model directory"],
        );
    }
    // A folder that is not there, a directory, and one file named twice.
    let missing = scratch.0.join("no-such-folder/logits.npy");
    scratch.refuses(
        &[
            "run",
            "--model",
            &model,
            "--quiet",
            "--logits-out",
            missing.to_str().unwrap(),
        ],
        &["--logits-out", "no-such-folder", "not there"],
    );
    scratch.refuses(
        &[
            "run",
            "--model",
            &model,
            "--quiet",
            "--force",
            "--trace",
            scratch.0.to_str().unwrap(),
        ],
        &["--trace", "not a regular file"],
    );
    let fresh = scratch.0.join("fresh.json");
    scratch.refuses(
        &[
            "run",
            "--model",
            &model,
            "--quiet",
            "--trace",
            fresh.to_str().unwrap(),
            "--profile-json",
            fresh.to_str().unwrap(),
        ],
        &["different files"],
    );

    // --force replaces a plain file, whole.
    let (code, _, stderr) = kscope(&[
        "run",
        "--model",
        &model,
        "--max-tokens",
        "2",
        "--quiet",
        "--force",
        "--logits-out",
        target,
    ]);
    assert_eq!(code, 0, "{stderr}");
    let bytes = std::fs::read(&existing).unwrap();
    assert!(bytes.starts_with(b"\x93NUMPY"), "not replaced by the logits");
    let leftovers: Vec<_> = std::fs::read_dir(&scratch.0)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[test]
fn gen_model_checks_the_whole_target_first() {
    let scratch = Scratch::new("gen-model");
    let folder = scratch.0.join("hand-written");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(folder.join("config.json"), "{\"my\": \"own config\"}").unwrap();
    let out = folder.to_str().unwrap();
    scratch.refuses(
        &["gen-model", "--preset", "tiny", "--quiet", "--out", out],
        &["config.json already there", "--force"],
    );
    // A sharded checkpoint is never overwritten, even with --force.
    let sharded = scratch.0.join("sharded");
    std::fs::create_dir(&sharded).unwrap();
    std::fs::write(sharded.join("config.json"), "{}").unwrap();
    std::fs::write(
        sharded.join("model.safetensors.index.json"),
        "{\"weight_map\": {}}",
    )
    .unwrap();
    scratch.refuses(
        &[
            "gen-model",
            "--preset",
            "tiny",
            "--quiet",
            "--force",
            "--out",
            sharded.to_str().unwrap(),
        ],
        &["sharded checkpoint", "model.safetensors.index.json"],
    );
    // Not a directory at all.
    let file = scratch.0.join("a-file");
    std::fs::write(&file, "x").unwrap();
    scratch.refuses(
        &[
            "gen-model",
            "--preset",
            "tiny",
            "--quiet",
            "--out",
            file.to_str().unwrap(),
        ],
        &["--out", "not a directory"],
    );
    // The generated checkpoint itself, without --force.
    let model = scratch.model_arg();
    scratch.refuses(
        &["gen-model", "--preset", "tiny", "--quiet", "--out", &model],
        &["config.json and model.safetensors already there"],
    );
    // With --force the two files are replaced and nothing else is left.
    let (code, _, stderr) = kscope(&[
        "gen-model",
        "--preset",
        "tiny-qwen2",
        "--quiet",
        "--force",
        "--out",
        &model,
    ]);
    assert_eq!(code, 0, "{stderr}");
    let mut names: Vec<String> = std::fs::read_dir(scratch.model())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["config.json", "model.safetensors"]);
    assert!(
        std::fs::read_to_string(scratch.model().join("config.json"))
            .unwrap()
            .contains("Qwen2ForCausalLM")
    );
}

#[test]
fn profiles_that_cannot_be_true_are_refused_by_compare() {
    let scratch = Scratch::new("profiles");
    let base = scratch.0.join("base.json");
    let (code, _, stderr) = kscope(&[
        "run",
        "--max-tokens",
        "3",
        "--profile-json",
        base.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let profile: Value = serde_json::from_str(&std::fs::read_to_string(&base).unwrap()).unwrap();
    let edited = scratch.0.join("edited.json");
    let compare_refuses = |edit: &dyn Fn(&mut Value), needles: &[&str]| {
        let mut copy = profile.clone();
        edit(&mut copy);
        std::fs::write(&edited, serde_json::to_string(&copy).unwrap()).unwrap();
        scratch.refuses(
            &["compare", base.to_str().unwrap(), edited.to_str().unwrap()],
            &[&["edited.json"], needles].concat(),
        );
    };
    // A dispatch that ends before it starts (was clamped to 0: "no regression").
    compare_refuses(
        &|profile| {
            let dispatch = &mut profile["dispatches"][0];
            let start = dispatch["start_ns"].as_u64().unwrap();
            dispatch["end_ns"] = json!(start - 1);
        },
        &["dispatches[0]", "before start_ns"],
    );
    compare_refuses(
        &|profile| {
            let token = &mut profile["tokens"][1];
            token["end_ns"] = json!(0);
            token["start_ns"] = json!(5);
        },
        &["token", "before start_ns"],
    );
    // Counters whose sum wraps past 2^64 (was a plain `+`).
    compare_refuses(
        &|profile| {
            for token in profile["tokens"].as_array_mut().unwrap() {
                token["counters"]["dispatches"] = json!(u64::MAX / 2 + 7);
            }
        },
        &["counters", "past 2^64"],
    );
    compare_refuses(
        &|profile| {
            for dispatch in profile["dispatches"].as_array_mut().unwrap() {
                dispatch["bytes"] = json!(u64::MAX / 3);
            }
        },
        &["dispatch bytes", "past 2^64"],
    );
}

#[test]
fn usage_errors_keep_clap_hints_and_name_the_argument() {
    // `kscope` alone: the help, with every subcommand.
    let (code, stdout, stderr) = kscope(&[]);
    assert_eq!(code, 2, "{stdout}");
    for subcommand in ["run", "bench", "compare", "gen-model", "info"] {
        assert!(stderr.contains(subcommand), "help lists {subcommand}: {stderr}");
    }
    // The missing argument is named (clap's second line used to be cut).
    let (code, _, stderr) = kscope(&["gen-model"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("--preset") && stderr.contains("--out"),
        "{stderr}"
    );
    assert!(stderr.contains("Usage:"), "{stderr}");
    assert!(stderr.lines().count() <= 5, "{stderr}");
    // An unknown flag keeps clap's tip.
    let (code, _, stderr) = kscope(&["run", "--max-token", "3"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("--max-token") && stderr.contains("tip"),
        "{stderr}"
    );
    // --help and --version succeed.
    assert_eq!(kscope(&["--help"]).0, 0);
    assert_eq!(kscope(&["run", "--help"]).0, 0);
    assert_eq!(kscope(&["--version"]).0, 0);
}

#[test]
fn negative_numbers_get_a_message_about_the_value() {
    for (args, needles) in [
        (
            vec!["run", "--max-tokens", "-5"],
            vec!["--max-tokens", "`-5` is not a count"],
        ),
        (
            vec!["run", "--temperature", "-1"],
            vec!["--temperature", "non-negative", "-1"],
        ),
        (vec!["run", "--top-p", "-0.5"], vec!["--top-p", "(0, 1]"]),
        (vec!["run", "--seed", "-1"], vec!["--seed", "`-1` is not a seed"]),
        (
            vec!["run", "--token-ids", "1,-2,3"],
            vec!["--token-ids", "`-2` is not a token id"],
        ),
        (vec!["bench", "-r", "-3"], vec!["-r", "`-3` is not a count"]),
        (vec!["bench", "-p", "-1"], vec!["`-1` is not a count"]),
        (
            vec!["gen-model", "--preset", "tiny", "--out", "x", "--seed", "-9"],
            vec!["`-9` is not a seed"],
        ),
    ] {
        refused(&args, &needles);
        let (_, _, stderr) = kscope(&args);
        assert!(!stderr.contains("use '-- "), "{args:?}: misleading tip: {stderr}");
    }
}

#[test]
fn bench_refuses_counts_that_would_exhaust_memory_or_wrap() {
    for (args, needles) in [
        (
            vec!["bench", "-r", "100000000000", "--bandwidth-mib", "0"],
            vec!["-r 100000000000", "1..=10000"],
        ),
        (
            vec!["bench", "--bandwidth-mib", "17592186044416"],
            vec!["--bandwidth-mib", "16384"],
        ),
        (
            vec!["bench", "--bandwidth-mib", "100000"],
            vec!["--bandwidth-mib 100000", "16384"],
        ),
        (
            vec!["bench", "-p", "100000", "--bandwidth-mib", "0"],
            vec!["-p 100000", "context is 512"],
        ),
        (vec!["bench", "-r", "0"], vec!["-r 0", "1..=10000"]),
        (
            vec!["bench", "--compute-size", "100000"],
            vec!["--compute-size", "100000", "0..=16384"],
        ),
        (
            vec!["run", "--compute-size", "-8"],
            vec!["--compute-size", "`-8` is not a count"],
        ),
        (
            vec!["info", "--compute-size", "16385"],
            vec!["--compute-size", "16385", "0..=16384"],
        ),
    ] {
        refused(&args, &needles);
    }
}

#[test]
fn a_reader_that_goes_away_ends_kscope_without_a_panic() {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = Command::new(kscope_binary())
        .args(["run", "--profile", "--max-tokens", "8"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read one line's worth, then close the pipe (like `| head -1`).
    let mut first = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(output.status.code(), Some(101), "{stderr}");
}
