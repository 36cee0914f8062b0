//! The model library's errors as the command line prints them: the library
//! speaks of ranks, kscope of the flag that set them, so a split that cannot
//! be made is one line naming `--tp` and the `--tp` values that work (a
//! launcher's ranks: tests/cli_ranks_as_processes.rs).

mod common;

use common::{gen_model, kscope};

/// Runs `args`, expecting exit 2 and one `error:` line; returns that line.
fn error_line(args: &[&str]) -> String {
    let (code, stdout, stderr) = kscope(args);
    assert_eq!(code, 2, "args {args:?}\nstdout: {stdout}\nstderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr.trim_end().to_string()
}

#[test]
fn a_split_the_heads_refuse_names_tp_and_the_values_that_work() {
    // The tiny preset's 4 query heads in groups over 2 key/value heads.
    let line = error_line(&[
        "run",
        "--device",
        "cpu",
        "--tp",
        "3",
        "--max-tokens",
        "1",
        "--quiet",
    ]);
    for needle in [
        "cannot split the model over 3 ranks (--tp 3)",
        "a head cannot be split",
        "splits that work up to --tp 4: --tp 1, 2, 4",
    ] {
        assert!(line.contains(needle), "missing `{needle}` in: {line}");
    }
    // Said before any device opens: three GPUs that are not there (no
    // CUDA here, or not three of them) are never asked for.
    let line = error_line(&[
        "run",
        "--device",
        "cuda",
        "--tp",
        "3",
        "--max-tokens",
        "1",
        "--quiet",
    ]);
    assert!(
        line.contains("cannot split the model over 3 ranks (--tp 3)"),
        "{line}"
    );
}

#[test]
fn a_split_that_leaves_a_rank_nothing_names_tp_and_the_values_that_work() {
    let directory = std::env::temp_dir().join(format!("kscope-model-errors-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    gen_model("tiny", 3, &directory);
    // 9 intermediate rows in shares of 3 leave the fourth rank nothing.
    let config = directory.join("config.json");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("\"intermediate_size\": 352"), "{text}");
    std::fs::write(
        &config,
        text.replace("\"intermediate_size\": 352", "\"intermediate_size\": 9"),
    )
    .unwrap();
    let model = directory.to_str().unwrap();
    let line = error_line(&["run", "--model", model, "--device", "cpu", "--tp", "4", "--quiet"]);
    let _ = std::fs::remove_dir_all(&directory);
    for needle in [
        "cannot split the model over 4 ranks (--tp 4)",
        "intermediate_size (9) leaves the last rank nothing in shares of 3",
        "splits that work up to --tp 8: --tp 1, 2, 3, 5",
    ] {
        assert!(line.contains(needle), "missing `{needle}` in: {line}");
    }
}
