//! The profile schema a reader is told about is the one kscope writes:
//! every "schema N" in the CLI's help and in the docs names
//! `PROFILE_SCHEMA_VERSION`, unless it speaks of the past ("before schema
//! N", "schema N and older"). `run --help` once said "schema 1" two bumps
//! after the fact.

mod common;

use common::kscope;
use kernelscope::profile::PROFILE_SCHEMA_VERSION;

/// Each "schema N" in `text` that speaks of today: (N, the words around it).
fn current_mentions(text: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("schema ") {
        let digits: String = text[at + 7..].chars().take_while(char::is_ascii_digit).collect();
        let Ok(number) = digits.parse::<u32>() else {
            continue;
        };
        let before = &text[at.saturating_sub(12)..at];
        let after = &text[at + 7 + digits.len()..];
        let past = before.ends_with("before ")
            || before.ends_with("from ")
            || after.starts_with(" and older")
            || after.starts_with(" and earlier");
        if !past {
            let context =
                text[at.saturating_sub(40)..(at + 7 + digits.len() + 20).min(text.len())].to_string();
            found.push((number, context));
        }
    }
    found
}

#[test]
fn every_schema_number_a_reader_sees_is_the_one_kscope_writes() {
    let mut texts = Vec::new();
    for command in [
        "run",
        "profile",
        "bench",
        "report",
        "compare",
        "gen-model",
        "kl",
        "quantize",
        "calibrate",
        "info",
    ] {
        let (code, stdout, stderr) = kscope(&[command, "--help"]);
        assert_eq!(code, 0, "{command} --help: {stderr}");
        texts.push((format!("kscope {command} --help"), stdout));
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for doc in ["README.md", "docs/ARCHITECTURE.md", "docs/CONTRIBUTING.md"] {
        texts.push((doc.to_string(), std::fs::read_to_string(root.join(doc)).unwrap()));
    }
    let mut seen = 0;
    for (source, text) in &texts {
        for (number, context) in current_mentions(text) {
            assert_eq!(
                number, PROFILE_SCHEMA_VERSION,
                "{source} says schema {number} where kscope writes {PROFILE_SCHEMA_VERSION}: …{context}…"
            );
            seen += 1;
        }
    }
    // The help of --profile-json names it, so the check checks something.
    assert!(seen >= 1, "no schema number found anywhere");
    assert!(
        texts[0].1.contains(&format!("schema {PROFILE_SCHEMA_VERSION}")),
        "run --help names no schema"
    );
}

#[test]
fn mentions_of_the_past_are_told_apart_from_today() {
    let text = "profiles before schema 2 load; schema 1 and older too; write schema 9 now";
    let found: Vec<u32> = current_mentions(text)
        .into_iter()
        .map(|(number, _)| number)
        .collect();
    assert_eq!(found, vec![9]);
}
