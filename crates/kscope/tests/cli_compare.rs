//! `kscope compare` end to end: exit 1 on a constructed 20% slowdown, 0 on
//! identical inputs, 2 on mismatched conditions and on bad files, each with
//! a one-line message naming the file and the problem; op kinds a newer
//! build wrote are compared by name.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::{ScratchFolder as Scratch, kscope_binary};
use kernelscope::testing::synthetic_profile;

/// `kscope compare ARGS...`: exit code, stdout, stderr.
fn kscope(args: &[&Path]) -> (i32, String, String) {
    let args: Vec<&str> = args.iter().map(|path| path.to_str().unwrap()).collect();
    common::kscope(&[&["compare"][..], &args].concat())
}

#[test]
fn slowdown_exits_one_and_identical_exits_zero() {
    let scratch = Scratch::new("verdicts");
    let base = scratch.file("base.json", &synthetic_profile(8, 1.0, 1).to_json());
    let slow = scratch.file("slow.json", &synthetic_profile(8, 1.2, 2).to_json());
    let (code, stdout, _) = kscope(&[&base, &slow]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("REGRESSED") && stdout.contains("MatVec"),
        "{stdout}"
    );
    let (code, stdout, _) = kscope(&[&base, &base]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("no regression"));
}

#[test]
fn threshold_flag_changes_the_verdict() {
    let scratch = Scratch::new("threshold");
    let base = scratch.file("base.json", &synthetic_profile(8, 1.0, 1).to_json());
    let slow = scratch.file("slow.json", &synthetic_profile(8, 1.2, 2).to_json());
    let output = Command::new(kscope_binary())
        .args(["compare", "--threshold", "50%"])
        .args([&base, &slow])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "20% is under a 50% threshold");
}

#[test]
fn mismatched_conditions_exit_two_unless_forced() {
    let scratch = Scratch::new("conditions");
    let base_profile = synthetic_profile(4, 1.0, 1);
    let mut other = base_profile.clone();
    other.conditions.backend = "cuda".into();
    let base = scratch.file("base.json", &base_profile.to_json());
    let gpu = scratch.file("gpu.json", &other.to_json());
    let (code, _, stderr) = kscope(&[&base, &gpu]);
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with("error: profiles were taken under different conditions"),
        "{stderr}"
    );
    assert!(
        stderr.contains("backend: cpu vs cuda") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    let output = Command::new(kscope_binary())
        .args(["compare", "--force"])
        .args([&base, &gpu])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
}

#[test]
fn bad_files_exit_two_naming_file_and_problem() {
    let scratch = Scratch::new("bad");
    let good = scratch.file("good.json", &synthetic_profile(2, 1.0, 1).to_json());
    let not_json = scratch.file("notes.txt", "hello");
    let no_schema = scratch.file("other.json", "{\"traceEvents\": []}");
    let future = scratch.file(
        "future.json",
        &synthetic_profile(2, 1.0, 1).to_json().replacen(
            &format!("\"schema\": {}", kernelscope::profile::PROFILE_SCHEMA_VERSION),
            "\"schema\": 7",
            1,
        ),
    );
    let missing = scratch.0.join("missing.json");
    let cases: [(&Path, &str); 4] = [
        (&not_json, "not JSON"),
        (&no_schema, "not a kernelscope profile"),
        (&future, "schema 7 is not supported"),
        (&missing, "cannot read"),
    ];
    for (bad, problem) in cases {
        let (code, _, stderr) = kscope(&[&good, bad]);
        assert_eq!(code, 2, "{bad:?}: {stderr}");
        assert!(
            stderr.contains(&*bad.to_string_lossy()),
            "names the file: {stderr}"
        );
        assert!(stderr.contains(problem), "{problem}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    }
    let output = Command::new(kscope_binary())
        .args(["compare", "--threshold", "lots"])
        .args([&good, &good])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn info_json_has_every_ceiling_with_its_method() {
    let (code, stdout, stderr) = common::kscope(&["info", "--json", "--bandwidth-mib", "8"]);
    assert_eq!(code, 0, "{stderr}");
    let info: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let cpu = &info["devices"][0];
    assert_eq!(cpu["backend"], "cpu", "{info}");
    let ceilings = &cpu["ceilings"];
    for (name, unit) in [
        ("read", "GB/s"),
        ("write", "GB/s"),
        ("copy", "GB/s"),
        ("compute", "GFLOP/s"),
    ] {
        assert!(ceilings[name]["value"].as_f64().unwrap() > 0.0, "{name}: {info}");
        assert_eq!(ceilings[name]["unit"], unit, "{name}");
        assert!(!ceilings[name]["method"].as_str().unwrap().is_empty(), "{name}");
    }
    // Every instruction set measured, the compute ceiling the best of them.
    let peaks = cpu["instruction_peaks"].as_array().unwrap();
    assert!(!peaks.is_empty(), "{info}");
    let best = peaks
        .iter()
        .map(|peak| peak["gflops"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert_eq!(ceilings["compute"]["value"].as_f64().unwrap(), best);
    let ridge = cpu["ridge_point_flop_per_byte"].as_f64().unwrap();
    let expected = best / ceilings["read"]["value"].as_f64().unwrap();
    assert!(
        (ridge - expected).abs() <= 1e-9 * expected,
        "{ridge} vs {expected}"
    );
}

#[test]
fn calibrate_prints_the_timing_check_and_the_ceilings() {
    let (code, stdout, stderr) =
        common::kscope(&["calibrate", "--device", "cpu", "--json", "--bandwidth-mib", "8"]);
    // Exit 1 would mean a spin missed its target on a busy host: the
    // ceilings are printed either way.
    assert!(code == 0 || code == 1, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(!report["points"].as_array().unwrap().is_empty(), "{report}");
    let ceilings = &report["ceilings"]["ceilings"];
    for name in ["read", "write", "copy", "compute"] {
        assert!(
            ceilings[name]["value"].as_f64().unwrap() > 0.0,
            "{name}: {report}"
        );
    }
    assert!(
        ceilings["read"]["method"].as_str().unwrap().contains("of 8 MiB"),
        "{report}"
    );
    // Text: the table, then the ceilings with their methods.
    let (_, stdout, _) = common::kscope(&["calibrate", "--device", "cpu", "--bandwidth-mib", "0"]);
    assert!(
        stdout.contains("ceilings of cpu")
            && stdout.contains("compute ceiling: ")
            && !stdout.contains("memory read ceiling"),
        "{stdout}"
    );
    // --json and --output together are refused.
    let (code, _, stderr) = common::kscope(&["calibrate", "--json", "--output", "md"]);
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn info_lists_backends_and_timing_capabilities() {
    let output = Command::new(kscope_binary())
        .args(["info", "--bandwidth-mib", "8"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let stdout = String::from_utf8(output.stdout).unwrap();
    for needle in [
        "backends compiled in: cpu",
        "per-submission timing: supported (host clock)",
        "per-dispatch timing: host clock",
        "memory read ceiling: ",
        "(stream_read probe: best of 5 streaming reads (bytes read) of 8 MiB, timed by ",
        "memory write ceiling: ",
        "memory copy bandwidth: ",
        "compute ceiling: ",
        "in registers on",
        "instruction: ",
        "ridge point: ",
        "cuda:",
    ] {
        assert!(stdout.contains(needle), "missing `{needle}`:\n{stdout}");
    }
    let (code, stdout, _) = common::kscope(&["info", "--no-bandwidth", "--compute-size", "24"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("compute ceiling: ")
            && !stdout.contains("memory read ceiling")
            && !stdout.contains("ridge point"),
        "{stdout}"
    );
    let (code, stdout, _) = common::kscope(&["info", "--no-bandwidth", "--no-compute"]);
    assert_eq!(code, 0);
    assert!(
        !stdout.contains("compute ceiling") && stdout.contains("per-dispatch timing"),
        "{stdout}"
    );
}

#[test]
fn profiles_of_a_newer_build_still_compare_by_their_verdicts() {
    // Op kinds this build does not know (a newer build's) are compared by
    // name: a real slowdown still exits 1, the same run still exits 0.
    let scratch = Scratch::new("newer-kinds");
    let newer = |profile: kernelscope::profile::Profile| {
        profile
            .to_json()
            .replace("\"op_kind\": \"Attention\"", "\"op_kind\": \"GroupedGemm\"")
            .replace("\"op_kind\": \"MatVec\"", "\"op_kind\": \"RmsNorm+MatVec\"")
    };
    let base = scratch.file("base.json", &newer(synthetic_profile(8, 1.0, 1)));
    let slow = scratch.file("slow.json", &newer(synthetic_profile(8, 1.2, 2)));
    let (code, stdout, stderr) = kscope(&[&base, &slow]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout
            .lines()
            .any(|line| line.contains("| GroupedGemm ") && line.contains("REGRESSED")),
        "{stdout}"
    );
    let (code, stdout, _) = kscope(&[&base, &base]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("| RmsNorm+MatVec "), "{stdout}");
}

/// The synthetic profile as a run of llama-3.2-1b's shape (or `layers`
/// layers of it) from the GGUF file `file` of type `format`, its mat-vecs
/// renamed to read that format (`matvec_q4_k_q8`), every duration
/// multiplied by `slowdown`.
fn gguf_run(
    file: &str,
    format: &str,
    layers: usize,
    slowdown: f64,
    seed: u64,
) -> kernelscope::profile::Profile {
    let mut profile = synthetic_profile(8, slowdown, seed);
    let kernel_format = format
        .split('_')
        .take(2)
        .collect::<Vec<_>>()
        .join("_")
        .to_lowercase();
    for record in &mut profile.dispatches {
        if &*record.kernel == "matvec_bf16" {
            record.kernel = format!("matvec_{kernel_format}_q8").into();
        }
    }
    profile.conditions.model = Some(format!("/models/{file} ({format}: 113 {format}, 34 F32)"));
    profile.conditions.weight_format = Some(format.to_string());
    profile.conditions.model_shape = Some(format!(
        "llama: {layers} layers, hidden 2048, intermediate 8192, 32 heads, 8 kv heads, head dim 64, vocab 128256"
    ));
    profile
}

fn compare_forced(base: &Path, new: &Path) -> (i32, String, String) {
    let output = Command::new(kscope_binary())
        .args(["compare", "--force"])
        .args([base, new])
        .output()
        .unwrap();
    (
        output.status.code().expect("exited normally"),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// The rows of a comparison table whose verdict is `verdict`, as `section what`.
fn rows_judged(stdout: &str, verdict: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (cells.len() == 9 && cells[7] == verdict).then(|| format!("{} {}", cells[1], cells[2]))
        })
        .collect()
}

#[test]
fn one_model_in_two_formats_compares_without_force() {
    let scratch = Scratch::new("formats");
    let q8 = scratch.file(
        "q8_0.json",
        &gguf_run("1b-Q8_0.gguf", "Q8_0", 16, 1.0, 1).to_json(),
    );
    let q4 = scratch.file(
        "q4_k_m.json",
        &gguf_run("1b-Q4_K_M.gguf", "Q4_K_M", 16, 1.0, 2).to_json(),
    );
    let slow_q4 = scratch.file(
        "q4_k_m-slow.json",
        &gguf_run("1b-Q4_K_M.gguf", "Q4_K_M", 16, 1.3, 3).to_json(),
    );
    // As fast: compared, exit 0, the change of format noted.
    let (code, stdout, stderr) = kscope(&[&q8, &q4]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("no regression"), "{stdout}");
    assert!(
        stdout.contains("note: weight format: Q8_0 vs Q4_K_M, one model shape (llama: 16 layers"),
        "{stdout}"
    );
    assert!(
        stdout.contains("weights Q8_0)") && stdout.contains("weights Q4_K_M)"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("compared despite different conditions"),
        "nothing forced: {stdout}"
    );
    // matvec_q8_0_q8 and matvec_q4_k_q8 are one MatVec row: nothing vanished, nothing new.
    assert!(
        stdout
            .lines()
            .any(|line| line.starts_with("| op ") && line.contains("| MatVec ")),
        "{stdout}"
    );
    assert!(rows_judged(&stdout, "new").is_empty(), "{stdout}");
    assert!(rows_judged(&stdout, "gone").is_empty(), "{stdout}");
    // 30% slower in Q4_K_M: the gate still fails the comparison.
    let (code, stdout, stderr) = kscope(&[&q8, &slow_q4]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        rows_judged(&stdout, "REGRESSED").contains(&"op MatVec".to_string()),
        "{stdout}"
    );
    assert!(stdout.contains("note: weight format: Q8_0 vs Q4_K_M"), "{stdout}");
    // A dense run of the same shape against a quantized one: also one model.
    let mut dense = gguf_run("1b-BF16.gguf", "bf16", 16, 1.0, 4);
    dense.conditions.model = Some("llama-3.2-1b (synthetic, seed 0, bf16)".into());
    let dense = scratch.file("bf16.json", &dense.to_json());
    let (code, stdout, stderr) = kscope(&[&dense, &q4]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("note: weight format: bf16 vs Q4_K_M"), "{stdout}");
}

#[test]
fn another_model_refuses_without_force_and_says_why() {
    let scratch = Scratch::new("other-model");
    let one_b = scratch.file("1b.json", &gguf_run("1b-Q8_0.gguf", "Q8_0", 16, 1.0, 1).to_json());
    let eight_b = scratch.file(
        "8b.json",
        &gguf_run("8b-Q4_K_M.gguf", "Q4_K_M", 32, 1.0, 2).to_json(),
    );
    let (code, stdout, stderr) = kscope(&[&one_b, &eight_b]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.starts_with("error: profiles were taken under different conditions"),
        "{stderr}"
    );
    assert!(
        stderr.contains("(another model: 16 layers vs 32 layers)") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    let (code, stdout, stderr) = compare_forced(&one_b, &eight_b);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("compared despite different conditions: model: /models/1b-Q8_0.gguf"),
        "{stdout}"
    );

    // The same shape and format but another file (a fine-tune, a copy): refused.
    let other_file = scratch.file(
        "other.json",
        &gguf_run("1b-instruct-Q8_0.gguf", "Q8_0", 16, 1.0, 3).to_json(),
    );
    let (code, _, stderr) = kscope(&[&one_b, &other_file]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("the same shape and weight format (Q8_0): another model or file"),
        "{stderr}"
    );

    // A profile from before shapes were recorded cannot tell: refused.
    let mut old = gguf_run("1b-Q4_K_M.gguf", "Q4_K_M", 16, 1.0, 4);
    old.conditions.model_shape = None;
    old.conditions.weight_format = None;
    let json = old.to_json();
    assert!(!json.contains("model_shape") && !json.contains("weight_format"));
    let old = scratch.file("old.json", &json);
    let (code, _, stderr) = kscope(&[&one_b, &old]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("a profile records no model shape"), "{stderr}");
    assert_eq!(compare_forced(&one_b, &old).0, 0);

    // One model in another format on another device: the device still refuses, alone.
    let mut gpu = gguf_run("1b-Q4_K_M.gguf", "Q4_K_M", 16, 1.0, 5);
    gpu.conditions.backend = "cuda".into();
    let gpu = scratch.file("gpu.json", &gpu.to_json());
    let (code, _, stderr) = kscope(&[&one_b, &gpu]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("(backend: cpu vs cuda)") && !stderr.contains("model:"),
        "{stderr}"
    );
    let (code, stdout, _) = compare_forced(&one_b, &gpu);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("compared despite different conditions: backend: cpu vs cuda\n")
            && stdout.contains("note: weight format: Q8_0 vs Q4_K_M"),
        "{stdout}"
    );
}

#[test]
fn runs_of_one_gguf_model_in_two_formats_compare() {
    // End to end: `kscope run` records the weights' format and the model's
    // shape, and `kscope compare` reads them.
    let scratch = Scratch::new("gguf-formats");
    let path = |name: &str| scratch.0.join(name).to_str().unwrap().to_string();
    for quant in ["q8_0", "q4_k_m"] {
        let (code, _, stderr) = common::kscope(&[
            "gen-model",
            "--preset",
            "tiny-256",
            "--quant",
            quant,
            "--quiet",
            "--out",
            &path(&format!("{quant}.gguf")),
        ]);
        assert_eq!(code, 0, "{stderr}");
    }
    let run = |model: &[&str], json: &str| {
        let mut args = vec!["run", "--device", "cpu", "--max-tokens", "3", "--quiet"];
        args.extend_from_slice(model);
        let json = path(json);
        args.extend(["--profile-json", &json]);
        let (code, stdout, stderr) = common::kscope(&args);
        assert_eq!(code, 0, "{stdout}{stderr}");
        PathBuf::from(json)
    };
    let q8 = run(&[&path("q8_0.gguf")], "q8_0.json");
    let q4 = run(&[&path("q4_k_m.gguf")], "q4_k_m.json");
    let tiny = run(&["--preset", "tiny"], "tiny.json");
    let recorded = kernelscope::profile::Profile::load(&q4).unwrap().conditions;
    assert_eq!(recorded.weight_format.as_deref(), Some("Q4_K_M"));
    assert_eq!(
        recorded.model_shape.as_deref(),
        Some("llama: 8 layers, hidden 256, intermediate 768, 4 heads, 2 kv heads, head dim 64, vocab 2048")
    );
    // Timings on a shared CPU decide 0 or 1; refusing (2) would be the bug.
    let (code, stdout, stderr) = kscope(&[&q8, &q4]);
    assert!(code == 0 || code == 1, "{code}: {stdout}{stderr}");
    assert!(
        stdout.contains("note: weight format: Q8_0 vs Q4_K_M, one model shape (llama: 8 layers"),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|line| line.starts_with("| op ") && line.contains("| MatVec ")),
        "{stdout}"
    );
    let (code, _, stderr) = kscope(&[&q8, &tiny]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("another model: 8 layers vs 4 layers, hidden 256 vs hidden 128"),
        "{stderr}"
    );
    // One file reached by another path is one model: compared, not refused.
    let again = run(&[&format!("{}/./q8_0.gguf", scratch.0.display())], "again.json");
    let (code, stdout, stderr) = kscope(&[&q8, &again]);
    assert!(code == 0 || code == 1, "{code}: {stdout}{stderr}");
    // Two files of one shape and format are still two models.
    std::fs::copy(path("q8_0.gguf"), path("copy.gguf")).unwrap();
    let copy = run(&[&path("copy.gguf")], "copy.json");
    let (code, _, stderr) = kscope(&[&q8, &copy]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("another model or file"), "{stderr}");
}
