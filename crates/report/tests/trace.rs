//! The Chrome trace: valid trace-event JSON with one complete event per
//! dispatch, nested in its submission's slice on the same track, a track of
//! tokens, and a window of tokens that keeps only those tokens' events.

mod common;

use common::recorded_profile;
use kernelscope::testing::synthetic_layered_profile;
use kernelscope_report::{chrome_trace, chrome_trace_of_tokens};

#[test]
fn chrome_trace_has_one_complete_event_per_dispatch() {
    let profile = recorded_profile();
    let text = serde_json::to_string(&chrome_trace(&profile)).unwrap();
    let trace: serde_json::Value = serde_json::from_str(&text).unwrap();
    let events = trace["traceEvents"].as_array().expect("traceEvents array");
    let of_category = |category: &str| -> Vec<&serde_json::Value> {
        events.iter().filter(|e| e["cat"] == category).collect()
    };
    let dispatches = of_category("dispatch");
    assert_eq!(dispatches.len(), profile.dispatches.len());
    for (event, record) in dispatches.iter().zip(&profile.dispatches) {
        assert_eq!(event["ph"], "X");
        assert_eq!(event["name"], &*record.kernel);
        assert_eq!(event["args"]["op_kind"], record.op_kind.to_string());
        // The bytes moved and the share of them written, as declared.
        assert_eq!(event["args"]["bytes"], record.bytes);
        assert_eq!(event["args"]["bytes_written"], record.bytes_written);
        assert!(record.bytes_written > 0 && record.bytes_written < record.bytes);
        let ts = event["ts"].as_f64().unwrap();
        let dur = event["dur"].as_f64().unwrap();
        assert!((ts - record.start_ns as f64 / 1e3).abs() < 1e-6, "µs timestamps");
        assert!(dur >= 0.0);
        assert!(event["pid"].is_number() && event["tid"].is_number());
    }
    // Labels are slices that contain their dispatches on the same track.
    let submissions = of_category("submission");
    assert_eq!(submissions.len(), 3);
    for submission in &submissions {
        assert_eq!(submission["name"], "token");
        let (start, end) = (
            submission["ts"].as_f64().unwrap(),
            submission["ts"].as_f64().unwrap() + submission["dur"].as_f64().unwrap(),
        );
        let inside = dispatches
            .iter()
            .filter(|d| {
                d["tid"] == submission["tid"]
                    && d["ts"].as_f64().unwrap() >= start
                    && d["ts"].as_f64().unwrap() + d["dur"].as_f64().unwrap() <= end + 1e-3
            })
            .count();
        assert_eq!(inside, 2, "each submission encloses its two dispatches");
    }
    assert_eq!(of_category("token").len(), 3);
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["ph"] == "M")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    assert!(names.iter().any(|n| n.contains("stream 0")), "{names:?}");
}

#[test]
fn a_token_window_keeps_only_its_tokens_in_the_trace() {
    let profile = synthetic_layered_profile(10, 2, &|_| 1.0, 25);
    let events = |trace: &serde_json::Value, category: &str| -> Vec<u64> {
        trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|event| event["cat"] == category)
            .map(|event| {
                event["args"]["token"].as_u64().unwrap_or_else(|| {
                    event["name"].as_str().unwrap()[6..]
                        .split(' ')
                        .next()
                        .unwrap()
                        .parse()
                        .unwrap()
                })
            })
            .collect()
    };
    let window = chrome_trace_of_tokens(&profile, Some(3..5));
    let dispatches = events(&window, "dispatch");
    assert_eq!(dispatches.len(), 2 * 6, "6 dispatches per token");
    assert!(dispatches.iter().all(|token| (3..5).contains(token)));
    assert_eq!(events(&window, "submission"), [3, 4]);
    assert_eq!(events(&window, "token"), [3, 4]);
    assert_eq!(
        events(&chrome_trace(&profile), "dispatch").len(),
        profile.dispatches.len(),
        "no window: everything"
    );
}
