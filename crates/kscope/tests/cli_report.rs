//! `kscope report` and `kscope compare --html` end to end: a saved profile
//! gives the short text report (layers folded, `--full` every one), an HTML
//! page and a trace of a window of tokens; bad input exits 2 with one line
//! naming what is wrong; an existing output file is kept without `--force`;
//! compare keeps its exit codes with `--html`; a profile of a newer build
//! (op kinds this build does not know) reports and compares under its
//! kinds' own names.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::kscope_binary;
use kernelscope::testing::synthetic_layered_profile;

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("kscope-report-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn kscope(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(kscope_binary()).args(args).output().unwrap();
    (
        output.status.code().expect("exited normally"),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn text(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn a_saved_profile_gives_the_report_the_page_and_a_window_of_the_trace() {
    let scratch = Scratch::new("outputs");
    let profile = scratch.path("run.json");
    std::fs::write(&profile, synthetic_layered_profile(6, 8, &|_| 1.0, 51).to_json()).unwrap();
    let (html, trace) = (scratch.path("run.html"), scratch.path("run.trace.json"));
    let (code, stdout, stderr) = kscope(&[
        "report",
        text(&profile),
        "--html",
        text(&html),
        "--trace",
        text(&trace),
        "--trace-tokens",
        "2..4",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("| layer.0–7 ×8 ±"), "folded:\n{stdout}");
    assert!(stdout.contains("report written to"), "{stdout}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.contains(r#"<svg class="roofline""#));
    assert_eq!(page.matches(r#"class="layer-bar"#).count(), 8);
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let tokens: Vec<u64> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["cat"] == "dispatch")
        .map(|event| event["args"]["token"].as_u64().unwrap())
        .collect();
    assert_eq!(tokens.len(), 2 * 24, "two tokens of 24 dispatches");
    assert!(tokens.iter().all(|token| (2..4).contains(token)));

    let (code, full, _) = kscope(&["report", text(&profile), "--full"]);
    assert_eq!(code, 0);
    assert!(full.contains("| layer.7 ") && !full.contains("×8"), "{full}");
    let (code, top, _) = kscope(&["report", text(&profile), "--top", "1"]);
    assert_eq!(code, 0);
    assert!(top.contains("… 2 more kernels"), "{top}");
}

#[test]
fn bad_report_arguments_exit_two_with_one_line() {
    let scratch = Scratch::new("refusals");
    let profile = scratch.path("run.json");
    std::fs::write(&profile, synthetic_layered_profile(4, 2, &|_| 1.0, 52).to_json()).unwrap();
    let existing = scratch.path("existing.html");
    std::fs::write(&existing, "keep me").unwrap();
    let trace = scratch.path("t.json");
    let missing = scratch.path("missing.json");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["report", text(&missing)], "cannot read"),
        (
            vec!["report", text(&profile), "--html", text(&existing)],
            "pass --force",
        ),
        (
            vec![
                "report",
                text(&profile),
                "--trace",
                text(&trace),
                "--trace-tokens",
                "5..2",
            ],
            "not a token window",
        ),
        (
            vec!["report", text(&profile), "--trace-tokens", "0..2"],
            "--trace",
        ),
        (
            vec![
                "report",
                text(&profile),
                "--trace",
                text(&trace),
                "--trace-tokens",
                "90..99",
            ],
            "the profile has tokens 0..4",
        ),
        (vec!["report", text(&profile), "--top", "0"], "positive count"),
        (
            vec!["report", text(&profile), "--html", text(&profile), "--force"],
            "the profile being read",
        ),
    ];
    for (args, needle) in cases {
        let (code, _, stderr) = kscope(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me");
    assert!(!trace.exists(), "no trace written for a refused window");
}

#[test]
fn compare_writes_its_page_and_keeps_its_exit_codes() {
    let scratch = Scratch::new("compare");
    let base = scratch.path("base.json");
    let slow = scratch.path("slow.json");
    std::fs::write(&base, synthetic_layered_profile(8, 4, &|_| 1.0, 53).to_json()).unwrap();
    std::fs::write(
        &slow,
        synthetic_layered_profile(8, 4, &|layer| if layer == 1 { 1.5 } else { 1.0 }, 54).to_json(),
    )
    .unwrap();
    let page = scratch.path("diff.html");
    let (code, stdout, stderr) = kscope(&["compare", text(&base), text(&slow), "--html", text(&page)]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains(r#"data-layer="layer.1""#) && html.contains("verdict-regressed"));
    // The page exists now: kept without --overwrite, replaced with it.
    let (code, _, stderr) = kscope(&["compare", text(&base), text(&base), "--html", text(&page)]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--overwrite") || stderr.contains("--force"),
        "{stderr}"
    );
    let (code, _, _) = kscope(&[
        "compare",
        text(&base),
        text(&base),
        "--html",
        text(&page),
        "--overwrite",
    ]);
    assert_eq!(code, 0);
    assert!(std::fs::read_to_string(&page).unwrap().contains("no regression"));
    // Never written over one of the profiles it reads.
    let (code, _, stderr) = kscope(&[
        "compare",
        text(&base),
        text(&slow),
        "--html",
        text(&base),
        "--overwrite",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("one of the profiles"), "{stderr}");
}

/// `profile`'s JSON as a build that knows more op kinds would write it:
/// attention run as `GroupedGemm`, the mat-vecs as a fused `Foo+Bar`.
fn with_newer_kinds(profile: &kernelscope::profile::Profile) -> String {
    profile
        .to_json()
        .replace("\"op_kind\": \"Attention\"", "\"op_kind\": \"GroupedGemm\"")
        .replace("\"op_kind\": \"MatVec\"", "\"op_kind\": \"Foo+Bar\"")
}

#[test]
fn a_profile_of_a_newer_build_reports_and_compares_with_its_own_kinds() {
    let scratch = Scratch::new("newer");
    let known = synthetic_layered_profile(6, 4, &|_| 1.0, 53);
    let (old, newer) = (scratch.path("old.json"), scratch.path("newer.json"));
    std::fs::write(&old, known.to_json()).unwrap();
    std::fs::write(&newer, with_newer_kinds(&known)).unwrap();
    let (html, trace) = (scratch.path("newer.html"), scratch.path("newer.trace.json"));
    let (code, stdout, stderr) = kscope(&[
        "report",
        text(&newer),
        "--html",
        text(&html),
        "--trace",
        text(&trace),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("| GroupedGemm ") && stdout.contains("| Foo+Bar "),
        "{stdout}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains(r#"data-op="GroupedGemm""#) && page.contains(r#"data-op="Foo+Bar""#));
    let trace = std::fs::read_to_string(&trace).unwrap();
    assert!(trace.contains(r#""op_kind":"GroupedGemm""#), "{trace}");

    let diff = scratch.path("diff.html");
    let (code, stdout, stderr) = kscope(&["compare", text(&old), text(&newer), "--html", text(&diff)]);
    assert_eq!(
        code, 0,
        "new and gone op kinds are no regression: {stdout}{stderr}"
    );
    let row = |key: &str| {
        stdout
            .lines()
            .find(|line| line.starts_with("| op ") && line.contains(&format!("| {key} ")))
            .unwrap_or_else(|| panic!("no op row {key}:\n{stdout}"))
            .to_string()
    };
    assert!(row("GroupedGemm").contains("| new "), "{stdout}");
    assert!(row("Attention").contains("| gone "), "{stdout}");
    let page = std::fs::read_to_string(&diff).unwrap();
    assert!(page.contains("no regression") && page.contains("Foo+Bar"));
    let (code, stdout, _) = kscope(&["compare", text(&newer), text(&newer)]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("| GroupedGemm "), "{stdout}");
}
