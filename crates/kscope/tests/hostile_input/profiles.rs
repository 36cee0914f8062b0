//! Profiles that cannot be true (ends before starts, sums past 2^64), refused by compare.

use serde_json::{Value, json};

use crate::common::kscope;
use crate::helpers::Scratch;

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
