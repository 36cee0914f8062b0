//! `--profile-tokens` end to end on the CPU: `run` times only the tokens
//! chosen (the report says how many, the profile marks the others untimed
//! and keeps their counters), `bench` prints the selection beside the cost,
//! and a selection that cannot apply is a one-line error with exit 2.

mod common;

use common::{expect_failure, kscope};

#[test]
fn run_times_only_the_chosen_tokens() {
    let path = std::env::temp_dir().join(format!("kscope-profile-tokens-{}.json", std::process::id()));
    let json = path.to_str().unwrap();
    let html_path = path.with_extension("html");
    let html = html_path.to_str().unwrap();
    let (code, stdout, stderr) = kscope(&[
        "run",
        "--device",
        "cpu",
        "--profile",
        "--profile-tokens",
        "2..5",
        "--max-tokens",
        "8",
        "--profile-json",
        json,
        "--html",
        html,
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("timed: 3 of "), "{stdout}");
    assert!(stdout.contains("(--profile-tokens 2..5)"), "{stdout}");
    assert!(!stdout.contains("FLAGGED"), "{stdout}");
    let profile: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).unwrap();
    let page = std::fs::read_to_string(&html_path).unwrap();
    std::fs::remove_file(&html_path).unwrap();
    let conditions = &profile["conditions"]["profiled_tokens"];
    assert_eq!(conditions["start"], 2);
    assert_eq!(conditions["end"], 5);
    let tokens = profile["tokens"].as_array().unwrap();
    assert!(tokens.len() >= 6, "{tokens:?}");
    for token in tokens {
        let index = token["index"].as_u64().unwrap();
        let timed = token.get("timed").is_none_or(|timed| timed.as_bool().unwrap());
        assert_eq!(timed, (2..5).contains(&index), "token {index}");
        // Every token's counters are kept, timed or not.
        assert!(
            token["counters"]["dispatches"].as_u64().unwrap() > 0,
            "token {index}"
        );
    }
    // The timeline draws the untimed tokens as such, not as host time.
    let untimed = tokens.len() - 3;
    assert_eq!(
        page.matches(r#"class="untimed""#).count(),
        untimed,
        "one outline per untimed token"
    );
    for record in profile["dispatches"].as_array().unwrap() {
        let token = record["token"].as_u64().unwrap();
        assert!((2..5).contains(&token), "dispatch of untimed token {token}");
    }
}

#[test]
fn bench_names_the_selection_beside_the_cost() {
    let (code, stdout, stderr) = kscope(&[
        "bench",
        "--device",
        "cpu",
        "-p",
        "0",
        "-n",
        "4",
        "-r",
        "1",
        "--bandwidth-mib",
        "0",
        "--profile",
        "dispatch",
        "--profile-tokens",
        "0..:3",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("--profile dispatch --profile-tokens 0..:3"),
        "{stdout}"
    );
}

#[test]
fn selections_that_cannot_apply_are_refused() {
    expect_failure(
        &["run", "--profile-tokens", "2..4"],
        &["--profile-tokens 2..4", "nothing is profiled"],
    );
    expect_failure(
        &["run", "--profile", "--profile-tokens", "4..2"],
        &["`4..2`", "end <= start"],
    );
    expect_failure(
        &["run", "--profile", "--profile-tokens", "0..:0"],
        &["`0..:0`", "step"],
    );
    expect_failure(
        &["bench", "-n", "4", "--profile-tokens", "0..2"],
        &["--profile-tokens 0..2", "--profile dispatch"],
    );
}
