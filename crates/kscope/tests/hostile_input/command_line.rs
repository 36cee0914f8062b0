//! The command line: usage errors, negative and huge numbers, and a reader that goes away.

use std::process::Command;

use crate::common::{kscope, kscope_binary};
use crate::helpers::refused;

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

#[test]
fn a_mistyped_local_path_is_said_to_be_missing_as_both() {
    // ORG/NAME or a relative path: neither exists, and the message says both.
    refused(
        &["run", "--model", "cases/does_not_exist", "--max-tokens", "1"],
        &[
            "cases/does_not_exist",
            "no such local file or directory",
            "not in the Hugging Face cache",
        ],
    );
}

#[test]
fn bandwidth_probes_larger_than_memory_are_refused_not_aborted() {
    // Under `ulimit -v` 2 GiB, CPU probes of 1 GiB (about 3 GiB held) would
    // abort on a failed allocation: refused first, naming the flag.
    for command in ["info", "calibrate"] {
        let output = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "ulimit -v 2097152; exec {} {command} --bandwidth-mib 1024",
                kscope_binary().display()
            ))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{command}: {stderr}");
        assert!(
            stderr.starts_with("error: --bandwidth-mib 1024") && stderr.contains("MiB are available"),
            "{command}: {stderr}"
        );
    }
}
