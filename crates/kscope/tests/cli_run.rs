//! `kscope run`, `gen-model` and `bench` end to end: the default command
//! works offline with no files, and every bad input gets a one-line error
//! naming the file (or value) and the problem, with exit code 2.

mod common;

use std::path::{Path, PathBuf};

use common::{expect_failure, gen_model, kscope};

/// A fresh tiny checkpoint in its own directory, removed on drop.
struct Checkpoint(PathBuf);

impl Checkpoint {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("kscope-run-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        gen_model("tiny", 5, &dir);
        Checkpoint(dir)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn edit_config(&self, from: &str, to: &str) {
        let path = self.file("config.json");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{from} not in config");
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    }
}

impl Drop for Checkpoint {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn default_run_profiles_the_built_in_model() {
    let (code, stdout, stderr) = kscope(&["run", "--profile", "--max-tokens", "6"]);
    assert_eq!(code, 0, "{stderr}");
    for needle in [
        "model: tiny (synthetic",
        "generated: 6 tokens",
        "prefill: 4 tokens",
        "decode: 5 tokens",
        // The 4-token prompt is one batched chunk: one profiler window.
        "first: token 1 (Decode)",
        "last: token 5 (Decode)",
        "| MatVec",
        "| Attention",
        "| lm_head",
        "per decode token",
        "cross-check decode",
        // Both ceilings measured before the run, and every row placed.
        "roofline: memory: read ",
        "GFLOP/s; ridge point",
        "  read ceiling ",
        "  write ceiling ",
        " FLOP/B |",
        " bound |",
        "% of peak",
    ] {
        assert!(stdout.contains(needle), "missing `{needle}`:\n{stdout}");
    }
    // Identical layers fold (the short report): a row stands for several
    // of them (`| layer.0–3 ×4 ±1.1%`). Which layers fold is timing: a
    // layer that ran slower than the others by more than the noise stands
    // apart, marked (on a GPU the first layer after the embedding often
    // does, as it did with the base build; on a loaded CPU any may). That
    // the fold follows the times exactly is tested on synthetic profiles in
    // kernelscope-report.
    let folded = stdout.lines().any(|line| {
        line.starts_with("| layer.")
            && line
                .split_once(" ×")
                .and_then(|(_, count)| count.split_whitespace().next())
                .and_then(|count| count.parse::<usize>().ok())
                .is_some_and(|count| count >= 2)
    });
    assert!(folded, "no row folds several layers:\n{stdout}");
    // --full: every layer on its own row.
    let (code, full, stderr) = kscope(&["run", "--profile", "--full", "--max-tokens", "6"]);
    assert_eq!(code, 0, "{stderr}");
    for layer in 0..4 {
        assert!(
            full.contains(&format!("| layer.{layer} ")),
            "layer.{layer}:\n{full}"
        );
    }
    assert!(!full.contains("×4 ±"), "{full}");
}

#[test]
fn profile_json_and_trace_files_are_written_and_comparable() {
    let dir = std::env::temp_dir().join(format!("kscope-run-outputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("p.json");
    let trace = dir.join("t.json");
    let logits = dir.join("l.npy");
    let (code, _, stderr) = kscope(&[
        "run",
        "--max-tokens",
        "4",
        "--profile-json",
        json.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--logits-out",
        logits.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let profile = kernelscope::profile::Profile::load(&json).unwrap();
    assert_eq!(
        profile.tokens.len(),
        4,
        "one window for the 4-token prompt chunk + 3 decode positions"
    );
    assert!(profile.dispatches.iter().any(|d| &*d.scope == "layer.0.attn"));

    // Every ceiling measured, each with its method; the roofline is drawn
    // at the read ceiling.
    let ceilings = &profile.conditions.ceilings;
    for name in ["read", "write", "copy", "compute"] {
        let (_, _, ceiling) = ceilings
            .each()
            .find(|(each, _, _)| *each == name)
            .unwrap_or_else(|| panic!("no {name} ceiling in {ceilings:?}"));
        assert!(
            ceiling.value.is_finite() && ceiling.value > 0.0,
            "{name}: {ceiling:?}"
        );
        assert!(!ceiling.method.is_empty(), "{name}");
    }
    assert_eq!(
        ceilings.bandwidth(),
        ceilings
            .read
            .as_ref()
            .map(|read| (read.value, kernelscope::profile::BandwidthBasis::Read))
    );
    assert!(profile.conditions.ridge_point().is_some());
    let rows = kernelscope_model::npy::read_f32_2d(&logits).unwrap();
    assert_eq!((rows.len(), rows[0].len()), (7, 2048));
    let trace: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    assert!(trace["traceEvents"].as_array().unwrap().len() > profile.dispatches.len());
    let (code, stdout, _) = kscope(&["compare", json.to_str().unwrap(), json.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}");

    // Without the compute probe the profile says the compute ceiling is
    // unknown, and it still compares with one that has it.
    let without = dir.join("without.json");
    let (code, stdout, stderr) = kscope(&[
        "run",
        "--max-tokens",
        "4",
        "--compute-size",
        "0",
        "--profile",
        "--profile-json",
        without.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("compute ceiling unknown (compute probe not run)"),
        "{stdout}"
    );
    let profile = kernelscope::profile::Profile::load(&without).unwrap();
    assert_eq!(profile.conditions.ceilings.compute, None);
    assert!(profile.conditions.ceilings.read.is_some());
    let (code, stdout, _) = kscope(&["compare", json.to_str().unwrap(), without.to_str().unwrap()]);
    assert_ne!(code, 2, "peaks never refuse a comparison: {stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_model_directories_are_named() {
    let missing = Path::new("/nonexistent/model");
    expect_failure(
        &["run", "--model", missing.to_str().unwrap()],
        &["/nonexistent/model", "no such file or directory"],
    );

    let checkpoint = Checkpoint::new("noconfig");
    std::fs::remove_file(checkpoint.file("config.json")).unwrap();
    expect_failure(
        &["run", "--model", checkpoint.path()],
        &[checkpoint.path(), "no config.json"],
    );

    let checkpoint = Checkpoint::new("badjson");
    std::fs::write(checkpoint.file("config.json"), "{ \"vocab_size\": ").unwrap();
    expect_failure(
        &["run", "--model", checkpoint.path()],
        &["config.json", "malformed config.json"],
    );

    let checkpoint = Checkpoint::new("arch");
    checkpoint.edit_config("LlamaForCausalLM", "GPT2LMHeadModel");
    expect_failure(
        &["run", "--model", checkpoint.path()],
        &["config.json", "GPT2LMHeadModel", "not supported"],
    );
}

#[test]
fn bad_safetensors_are_named() {
    let checkpoint = Checkpoint::new("truncated");
    let weights = checkpoint.file("model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    expect_failure(
        &["run", "--model", checkpoint.path()],
        &["model.safetensors", "truncated"],
    );

    std::fs::write(&weights, &bytes[..5]).unwrap();
    expect_failure(
        &["run", "--model", checkpoint.path()],
        &["model.safetensors", "truncated"],
    );

    let mut garbled = bytes.clone();
    garbled[8..16].copy_from_slice(b"not json");
    std::fs::write(&weights, &garbled).unwrap();
    expect_failure(
        &["run", "--model", checkpoint.path()],
        &["model.safetensors", "malformed"],
    );
}

#[test]
fn tensors_that_do_not_fit_the_config_are_named() {
    let checkpoint = Checkpoint::new("layers");
    checkpoint.edit_config("\"num_hidden_layers\": 4", "\"num_hidden_layers\": 5");
    expect_failure(
        &["run", "--model", checkpoint.path()],
        // More tensors than the files hold: the first one missing is named.
        &["model.layers.4.input_layernorm.weight", "missing"],
    );

    let checkpoint = Checkpoint::new("shape");
    // Narrower, so the files still hold enough bytes and the shape check speaks.
    checkpoint.edit_config("\"intermediate_size\": 352", "\"intermediate_size\": 344");
    expect_failure(
        &["run", "--model", checkpoint.path()],
        &[
            "model.safetensors",
            "model.layers.0.mlp.gate_proj.weight",
            "[352, 128]",
            "[344, 128]",
        ],
    );

    // Relabel one tensor as f16 (same size, padded with a space so the
    // header keeps its length): its dtype no longer matches the model's.
    let checkpoint = Checkpoint::new("dtype");
    let weights = checkpoint.file("model.safetensors");
    let mut bytes = std::fs::read(&weights).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8(bytes[8..8 + header_len].to_vec()).unwrap();
    let key = "\"model.norm.weight\":{\"dtype\":\"BF16\"";
    let position = header.find(key).expect("norm entry in header");
    let relabeled = header.replacen(key, "\"model.norm.weight\":{\"dtype\":\"F16\" ", 1);
    assert_eq!(relabeled.len(), header.len(), "at {position}");
    bytes[8..8 + header_len].copy_from_slice(relabeled.as_bytes());
    std::fs::write(&weights, bytes).unwrap();
    expect_failure(
        &["run", "--model", checkpoint.path()],
        &["model.norm.weight", "dtype f16", "expected bf16"],
    );
}

#[test]
fn bad_run_arguments_are_refused() {
    expect_failure(&["run", "--token-ids", "1,5000"], &["token id 5000", "2048"]);
    expect_failure(
        &["run", "--max-tokens", "600"],
        &["600 tokens to generate", "512"],
    );
    expect_failure(&["run", "--max-tokens", "0"], &["--max-tokens"]);
    expect_failure(&["run", "--prompt", "hello"], &["tokenizer.json", "--token-ids"]);
    expect_failure(&["run", "--preset", "gpt-5"], &["unknown preset `gpt-5`", "tiny"]);
    expect_failure(&["run", "--device", "tpu"], &["invalid device `tpu`"]);
    expect_failure(&["run", "--top-p", "1.5"], &["--top-p"]);
    expect_failure(
        &["run", "--cpu-kernels", "sse9"],
        &["`sse9`", "avx512-bf16, avx512-bf16-exact, avx2 or portable"],
    );
    expect_failure(
        &[
            "gen-model",
            "--preset",
            "tiny",
            "--out",
            "/tmp/x",
            "--dtype",
            "int8",
        ],
        &["int8", "bf16"],
    );
}

#[test]
fn the_cpu_kernels_can_be_chosen_and_the_profile_names_them() {
    // The portable kernels run on any CPU; the default is the widest the
    // CPU has. Both generate the same tokens on the tiny model.
    let (code, portable, stderr) = kscope(&[
        "run",
        "--device",
        "cpu",
        "--cpu-kernels",
        "portable",
        "--profile",
        "--max-tokens",
        "4",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(portable.contains("cpu kernels: portable"), "{portable}");
    let (code, widest, stderr) = kscope(&["run", "--device", "cpu", "--profile", "--max-tokens", "4"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(widest.contains("cpu kernels: "), "{widest}");
    let generated = |text: &str| {
        text.lines()
            .find(|line| line.starts_with("generated:"))
            .map(str::to_string)
    };
    assert!(generated(&portable).is_some(), "{portable}");
    assert_eq!(generated(&portable), generated(&widest));
}

#[test]
fn gen_model_refuses_to_overwrite_without_force() {
    let checkpoint = Checkpoint::new("overwrite");
    expect_failure(
        &["gen-model", "--preset", "tiny", "--out", checkpoint.path()],
        &["already there", "--force"],
    );
    let (code, stdout, _) = kscope(&[
        "gen-model",
        "--preset",
        "tiny",
        "--seed",
        "5",
        "--quiet",
        "--force",
        "--out",
        checkpoint.path(),
    ]);
    assert_eq!(code, 0);
    assert!(stdout.contains("38 tensors"), "{stdout}");
}

#[test]
fn bench_reports_rates_and_the_roofline() {
    let (code, stdout, stderr) = kscope(&[
        "bench",
        "-p",
        "8",
        "-n",
        "8",
        "-r",
        "2",
        "--bandwidth-mib",
        "8",
        "--output",
        "json",
        "--quiet",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let rows: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["test"], "pp8");
    assert_eq!(rows[1]["test"], "tg8");
    for row in rows {
        assert!(row["mean_tps"].as_f64().unwrap() > 0.0);
        assert_eq!(row["reps"], 2);
        assert!(row["roofline_tps"].as_f64().unwrap() > 0.0);
        assert!(row["peak_compute_gflops"].as_f64().unwrap() > 0.0, "{row}");
        assert_eq!(row["bandwidth_basis"], "read", "{row}");
        let ceilings = &row["ceilings"]["ceilings"];
        assert_eq!(row["bandwidth_gbps"], ceilings["read"]["value"], "{row}");
        // The CPU's compute ceiling is its widest instructions, a GPU's its GEMM.
        let method = ceilings["compute"]["method"].as_str().unwrap();
        let expected = if row["backend"] == "cpu" {
            "in registers"
        } else {
            "bf16 GEMM"
        };
        assert!(method.contains(expected), "{row}");
        assert!(
            row["profiling_cost"].is_null(),
            "not profiled, nothing to cost: {row}"
        );
    }
    // Profiled, the bench alternates unprofiled and profiled runs (after a
    // warm-up pass) and prints what profiling cost.
    let profiled_bench = |level: &str, extra: &[&str]| {
        let mut args = vec![
            "bench",
            "--device",
            "cpu",
            "-p",
            "0",
            "-n",
            "8",
            "-r",
            "2",
            "--bandwidth-mib",
            "8",
            "--compute-size",
            "0",
            "--quiet",
            "--profile",
            level,
        ];
        args.extend_from_slice(extra);
        kscope(&args)
    };
    let (code, stdout, stderr) = profiled_bench("dispatch", &["--output", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let rows: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let row = &rows[0];
    let (profiled, unprofiled) = (
        row["mean_tps"].as_f64().unwrap(),
        row["unprofiled_mean_tps"].as_f64().unwrap(),
    );
    let cost = row["profiling_cost"].as_f64().unwrap();
    // Two profiled runs of -r 2, alternated with two unprofiled.
    assert_eq!(row["reps"], 4, "{row}");
    assert!(
        unprofiled > 0.0 && (cost - (1.0 - profiled / unprofiled)).abs() < 1e-9,
        "{row}"
    );
    let (code, stdout, stderr) = profiled_bench("submission", &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("| unprofiled t/s | profiling cost |")
            && stdout.contains("profiling cost: 1 - rate at --profile submission / rate unprofiled"),
        "{stdout}"
    );
    // On the CPU by name: the default device is a GPU where there is one.
    let (code, stdout, _) = kscope(&[
        "bench",
        "--device",
        "cpu",
        "-p",
        "4",
        "-n",
        "0",
        "-r",
        "1",
        "--bandwidth-mib",
        "0",
        "--compute-size",
        "32",
    ]);
    assert_eq!(code, 0);
    assert!(stdout.contains("| pp4 |") && !stdout.contains("tg0"), "{stdout}");
    // The CPU's compute ceiling takes no size: its widest multiply-adds.
    assert!(
        stdout.contains("ceilings of cpu")
            && stdout.contains("compute ceiling: ")
            && stdout.contains("in registers on")
            && stdout.contains("roofline: not measured (--bandwidth-mib 0)"),
        "{stdout}"
    );
    let (code, stdout, _) = kscope(&[
        "bench",
        "-p",
        "0",
        "-n",
        "2",
        "-r",
        "1",
        "--bandwidth-mib",
        "8",
        "--compute-size",
        "32",
    ]);
    assert_eq!(code, 0);
    assert!(stdout.contains("ridge point: "), "{stdout}");
    let (code, stdout, _) = kscope(&[
        "bench",
        "-p",
        "4",
        "-n",
        "0",
        "-r",
        "1",
        "--bandwidth-mib",
        "0",
        "--compute-size",
        "0",
    ]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("compute ceiling: not measured (--compute-size 0)")
            && !stdout.contains("ridge point"),
        "{stdout}"
    );
    expect_failure(&["bench", "-r", "0"], &["-r"]);
}
