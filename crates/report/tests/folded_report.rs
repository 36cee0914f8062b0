//! The short text report: identical layers fold into one row with their
//! count and spread, a layer that differs by more than the noise unfolds
//! (exactly that one), `top_kernels` cuts the kernel table, and the full
//! report keeps every row.

mod common;

use common::row_keys;
use kernelscope::testing::synthetic_layered_profile;
use kernelscope_report::{ReportOptions, render_report_with};

#[test]
fn identical_layers_fold_into_one_row() {
    let profile = synthetic_layered_profile(8, 16, &|_| 1.0, 21);
    let short = render_report_with(&profile, ReportOptions::SHORT);
    let layers = row_keys(&short, "per layer, over");
    assert_eq!(layers.len(), 1, "{layers:?}");
    assert!(layers[0].starts_with("layer.0–15 ×16 ±"), "{layers:?}");
    let spread: f64 = layers[0]
        .trim_start_matches("layer.0–15 ×16 ±")
        .trim_end_matches('%')
        .parse()
        .unwrap();
    assert!(spread < 2.0, "jitter is ±2% per dispatch: {spread}");
    // In the order they first ran: each layer's mat-vec (mlp) comes first.
    let scopes = row_keys(&short, "per scope, over");
    assert_eq!(scopes.len(), 2, "{scopes:?}");
    assert!(scopes[0].starts_with("layer.0–15.mlp ×16"), "{scopes:?}");
    assert!(scopes[1].starts_with("layer.0–15.attn ×16"), "{scopes:?}");
    assert!(short.contains("layer.0–15 ×16"), "the token lines fold too");
    assert!(!short.contains("*: differs"), "nothing differs");

    let full = render_report_with(&profile, ReportOptions::FULL);
    let every = row_keys(&full, "per layer, over");
    let expected: Vec<String> = (0..16).map(|layer| format!("layer.{layer}")).collect();
    assert_eq!(every, expected);
}

#[test]
fn one_slow_layer_unfolds_exactly_that_layer() {
    let profile = synthetic_layered_profile(8, 16, &|layer| if layer == 7 { 1.3 } else { 1.0 }, 22);
    let short = render_report_with(&profile, ReportOptions::SHORT);
    let layers = row_keys(&short, "per layer, over");
    assert_eq!(layers.len(), 3, "{layers:?}");
    assert!(layers[0].starts_with("layer.0–6 ×7 ±"), "{layers:?}");
    assert_eq!(layers[1], "layer.7 *");
    assert!(layers[2].starts_with("layer.8–15 ×8 ±"), "{layers:?}");
    assert!(short.contains("*: differs from the layers that do the same work"));
    // The slow layer's row holds its own time: 30% more than a folded layer's.
    let total_ms = |key: &str| -> f64 {
        let line = short
            .lines()
            .find(|line| line.starts_with(&format!("| {key}")))
            .unwrap();
        line.split('|').nth(3).unwrap().trim().parse().unwrap()
    };
    let per_folded_layer = total_ms("layer.0–6") / 7.0;
    let ratio = total_ms("layer.7 *") / per_folded_layer;
    assert!((1.25..1.35).contains(&ratio), "{ratio}");
}

#[test]
fn a_small_difference_within_the_noise_stays_folded() {
    // 1% slower: under the 3% floor.
    let profile = synthetic_layered_profile(8, 16, &|layer| if layer == 3 { 1.01 } else { 1.0 }, 23);
    let layers = row_keys(
        &render_report_with(&profile, ReportOptions::SHORT),
        "per layer, over",
    );
    assert_eq!(layers.len(), 1, "{layers:?}");
}

#[test]
fn top_kernels_cuts_the_kernel_table() {
    let profile = synthetic_layered_profile(4, 4, &|_| 1.0, 24);
    let options = ReportOptions {
        top_kernels: Some(2),
        ..ReportOptions::SHORT
    };
    let report = render_report_with(&profile, options);
    let kernels = row_keys(&report, "per kernel, over");
    // The two slowest of the three: the mat-vec (100 µs) and attention (40 µs).
    assert_eq!(kernels, ["matvec_bf16", "attention_f32"]);
    assert!(report.contains("… 1 more kernels"));
    let all = row_keys(
        &render_report_with(&profile, ReportOptions::FULL),
        "per kernel, over",
    );
    assert_eq!(all.len(), 3);
}
