//! `kscope profile` where no GPU is: the command is documented, refuses to
//! start a program without CUDA (one line, exit 2, the program not run),
//! and turns kept record files (`--from-records`, made up by
//! `testing::program_records`) into the report, JSON, HTML and trace that
//! `report` and `compare` read; `compare` of two different programs is a gap account
//! without `--force`.

mod common;

use std::path::{Path, PathBuf};

use common::{expect_failure, kscope};
use kernelscope::testing::program_records::{ProgramShape, program_records};

/// A fresh folder for this test, removed when dropped.
struct Folder(PathBuf);

impl Folder {
    fn new(name: &str) -> Folder {
        let path = std::env::temp_dir().join(format!("kscope-cli-profile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Folder(path)
    }

    fn join(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_string()
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write_records(folder: &Path, shapes: &[(ProgramShape, u64)]) {
    for (shape, seed) in shapes {
        std::fs::write(
            folder.join(format!("{}.kst", shape.pid)),
            program_records(shape, *seed),
        )
        .unwrap();
    }
}

fn cuda_driver_present() -> bool {
    ["libcuda.so.1", "libcuda.so"].iter().any(|name| {
        let name = std::ffi::CString::new(*name).unwrap();
        // SAFETY: dlopen of a NUL-terminated name; the handle is closed at once.
        unsafe {
            let handle = libc::dlopen(name.as_ptr(), libc::RTLD_LAZY);
            if !handle.is_null() {
                libc::dlclose(handle);
            }
            !handle.is_null()
        }
    })
}

#[test]
fn help_documents_the_command_and_its_flags() {
    let (code, stdout, _) = kscope(&["profile", "--help"]);
    assert_eq!(code, 0);
    for flag in [
        "--step",
        "--profile-json",
        "--html",
        "--trace",
        "--trace-tokens",
        "--keep-records",
        "--from-records",
        "--injection",
        "--steps <A..B>",
        "--api-calls <HOW>",
        "--graphs <HOW>",
        "-- <CMD>",
    ] {
        assert!(stdout.contains(flag), "{flag} missing from:\n{stdout}");
    }
    let (_, top, _) = kscope(&["--help"]);
    assert!(
        top.contains("profile") && top.contains("Profile any CUDA program"),
        "{top}"
    );
}

#[test]
fn without_cuda_the_program_is_not_started() {
    if cuda_driver_present() {
        eprintln!(
            "SKIPPED without_cuda_the_program_is_not_started: this machine has the CUDA driver (the GPU suite's profile_program test covers it)"
        );
        return;
    }
    let folder = Folder::new("no-cuda");
    let marker = folder.join("started");
    let (code, stdout, stderr) = kscope(&["profile", "--", "touch", &marker]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("CUDA driver (libcuda.so.1)") && stderr.contains("the program was not started"),
        "{stderr}"
    );
    assert!(!Path::new(&marker).exists(), "the program ran");
}

/// A usage error of clap's (exit 2, its usage lines after the error) naming every needle.
fn refused(args: &[&str], needles: &[&str]) {
    let (code, _, stderr) = kscope(args);
    assert_eq!(code, 2, "args {args:?}: {stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "missing `{needle}` in: {stderr}");
    }
}

#[test]
fn bad_invocations_are_one_line_errors() {
    // Alone, like `kscope` alone: the help on stderr, as a usage error.
    refused(&["profile"], &["Usage: kscope profile"]);
    refused(
        &["profile", "--step", "x"],
        &["required arguments were not provided", "<CMD>"],
    );
    expect_failure(
        &["profile", "--from-records", "/nonexistent-kscope-folder"],
        &["--from-records", "not a folder"],
    );
    let folder = Folder::new("empty");
    expect_failure(
        &["profile", "--from-records", &folder.join("")],
        &["no record files (*.kst)"],
    );
    refused(
        &["profile", "--from-records", "/tmp", "--", "true"],
        &["cannot be used with"],
    );
    // A window counts the --step ranges, so needs them, and must hold a step.
    refused(&["profile", "--steps", "1..3", "--", "true"], &["--step <NAME>"]);
    refused(
        &["profile", "--step", "s", "--steps", "3..1", "--", "true"],
        &["expected A..B with whole numbers A < B"],
    );
    let dram_and_window = [
        "profile",
        "--step",
        "s",
        "--steps",
        "1..3",
        "--dram-bytes-interval",
        "10",
        "--",
        "true",
    ];
    refused(&dram_and_window, &["cannot be used with"]);
    refused(
        &["profile", "--api-calls", "sometimes", "--", "true"],
        &["activity", "callbacks"],
    );
    refused(
        &["profile", "--graphs", "some", "--", "true"],
        &["nodes", "whole", "events"],
    );
    // Graph launches timed by events leave CUPTI out: nothing that needs it, before anything starts.
    let folder = Folder::new("events");
    let marker = folder.join("started");
    for (flags, needles) in [
        (
            &["--dram-bytes-interval", "20"][..],
            ["--dram-bytes-interval", "--graphs events"],
        ),
        (
            &["--step", "s", "--steps", "1..3"][..],
            ["--steps", "--graphs events"],
        ),
    ] {
        let args: Vec<&str> = [
            &["profile", "--graphs", "events"][..],
            flags,
            &["--", "touch", &marker],
        ]
        .concat();
        expect_failure(&args, &[needles[0], needles[1], "The program was not started"]);
        assert!(!Path::new(&marker).exists(), "the program ran");
    }
}

#[test]
fn kept_records_give_the_report_json_html_and_trace() {
    let folder = Folder::new("records");
    let records = folder.0.join("records");
    std::fs::create_dir(&records).unwrap();
    write_records(&records, &[(ProgramShape::default(), 11)]);
    let (json, html, trace) = (
        folder.join("p.json"),
        folder.join("p.html"),
        folder.join("p.trace.json"),
    );
    let (code, stdout, stderr) = kscope(&[
        "profile",
        "--from-records",
        records.to_str().unwrap(),
        "--step",
        "step",
        "--profile-json",
        &json,
        "--html",
        &html,
        "--trace",
        &trace,
        "--full",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("program: python generate.py --steps 5 (recorded earlier, read from"),
        "{stdout}"
    );
    assert!(
        stdout.contains("steps (the tokens below): NVTX ranges named \"step\""),
        "{stdout}"
    );
    for needle in [
        "layer.0",
        "layer.1",
        "decode",
        "flash_fwd_kernel",
        "at::native::vectorized_elementwise_kernel",
    ] {
        assert!(stdout.contains(needle), "{needle} missing from:\n{stdout}");
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("generate.py") && page.contains("flash_fwd_kernel"));
    let trace_text = std::fs::read_to_string(&trace).unwrap();
    assert!(trace_text.contains("rms_norm_f32"));
    // `report` reads the JSON as it reads kscope's own.
    let (code, report, stderr) = kscope(&["report", &json, "--full"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(report.contains("NVTX ranges named"), "{report}");
}

#[test]
fn compare_sets_two_runs_of_a_program_side_by_side_and_refuses_another_program() {
    let folder = Folder::new("compare");
    let mut profiles = Vec::new();
    for (name, seed) in [("a", 21), ("b", 22)] {
        let records = folder.0.join(name);
        std::fs::create_dir(&records).unwrap();
        write_records(&records, &[(ProgramShape::default(), seed)]);
        let json = folder.join(&format!("{name}.json"));
        let (code, _, stderr) = kscope(&[
            "profile",
            "--from-records",
            records.to_str().unwrap(),
            "--step",
            "step",
            "--profile-json",
            &json,
        ]);
        assert_eq!(code, 0, "{stderr}");
        profiles.push(json);
    }
    let (code, stdout, stderr) = kscope(&["compare", &profiles[0], &profiles[1], "--threshold", "1000"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("layer.0") && stdout.contains("flash_fwd_kernel"),
        "{stdout}"
    );

    // kscope's own run is another program.
    let own = folder.join("own.json");
    let (code, _, stderr) = kscope(&[
        "run",
        "--device",
        "cpu",
        "--profile",
        "--max-tokens",
        "4",
        "--profile-json",
        &own,
    ]);
    assert_eq!(code, 0, "{stderr}");
    // Two engines compare as a gap account; only other hardware refuses.
    expect_failure(&["compare", &own, &profiles[0]], &["device:", "--force"]);
    let (code, stdout, stderr) = kscope(&["compare", &own, &profiles[0], "--force", "--threshold", "1000"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("compared despite different hardware") && stdout.contains("gap account"),
        "{stdout}"
    );
}

/// The folders two hosts of one distributed run kept, one rank each, read
/// together: one profile with both ranks, rank 0's steps its own, rank 1
/// beside it; a folder of them without records is named.
#[test]
fn the_folders_of_two_hosts_make_one_profile_of_both_ranks() {
    let folder = Folder::new("two-hosts");
    let (first_host, second_host) = (folder.0.join("host-a"), folder.0.join("host-b"));
    for path in [&first_host, &second_host] {
        std::fs::create_dir(path).unwrap();
    }
    let rank = |rank: u32, pid: u32| ProgramShape {
        rank: Some(rank),
        pid,
        all_reduces: true,
        ..ProgramShape::default()
    };
    // The same pid on both hosts, as separate machines may well give.
    write_records(&first_host, &[(rank(0, 4242), 21)]);
    write_records(&second_host, &[(rank(1, 4242), 22)]);
    let json = folder.join("p.json");
    let (code, stdout, stderr) = kscope(&[
        "profile",
        "--from-records",
        first_host.to_str().unwrap(),
        second_host.to_str().unwrap(),
        "--step",
        "step",
        "--profile-json",
        &json,
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("host-a, ") && stdout.contains("host-b"),
        "{stdout}"
    );
    // NCCL's all-reduces are the ranks' collectives, and each rank's steps
    // are cut into compute, communication and idle.
    for needle in [
        "collectives per scope",
        "per step on each rank's device (compute:",
        "means over 5 steps:",
        "imbalance (the slowest rank's compute less the fastest's)",
    ] {
        assert!(stdout.contains(needle), "{needle} missing from:\n{stdout}");
    }
    let profile: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(
        profile["conditions"]["topology"]["ranks"], 2,
        "{}",
        profile["conditions"]
    );
    assert_eq!(profile["conditions"]["program"]["processes"], 2);
    assert_eq!(
        profile["ranks"].as_array().unwrap().len(),
        1,
        "rank 1 beside rank 0's own"
    );
    let empty = folder.0.join("host-c");
    std::fs::create_dir(&empty).unwrap();
    expect_failure(
        &[
            "profile",
            "--from-records",
            first_host.to_str().unwrap(),
            empty.to_str().unwrap(),
        ],
        &["--from-records", "host-c", "no record files"],
    );
}
