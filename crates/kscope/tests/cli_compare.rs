//! `kscope compare` end to end: exit 1 on a constructed 20% slowdown, 0 on
//! identical inputs, 2 on mismatched conditions and on bad files, each with
//! a one-line message naming the file and the problem; op kinds a newer
//! build wrote are compared by name.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::kscope_binary;
use kernelscope::testing::synthetic_profile;

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("kscope-cli-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn kscope(args: &[&Path]) -> (i32, String, String) {
    let output = Command::new(kscope_binary())
        .arg("compare")
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().expect("exited normally"),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
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
