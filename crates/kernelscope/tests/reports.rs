//! Reports: the JSON profile round-trips and refuses other schemas, the
//! Chrome trace is valid trace-event JSON with one complete event per
//! dispatch, the human report has its sections, and compare finds a 20%
//! slowdown, passes identical runs and refuses mismatched conditions.

mod common;

use std::path::Path;

use kernelscope::profile::{Profile, ProfileLevel, Verdict, chrome_trace, compare, render_report};
use kernelscope::testing::{random_f32, synthetic_profile};
use kernelscope::{DType, Device, DeviceOptions, Dispatch, Error, OpKind};

/// A real profile from the CPU backend: 3 tokens of 2 scoped dispatches.
fn recorded_profile() -> Profile {
    let device = Device::cpu_with(DeviceOptions::new().profile(ProfileLevel::Dispatch));
    let kernel = common::inc_one_registry().kernel(&device, "inc_one").unwrap();
    let n = 4096;
    let a = device.buffer_from_slice(&random_f32(40, n), &[n]).unwrap();
    let b = device.alloc(DType::F32, &[n]).unwrap();
    let mut encoder = device.command_encoder();
    for _ in 0..3 {
        device.profiler().begin_token(kernelscope::profile::Phase::Decode);
        encoder.set_scope("layer.0.attn");
        encoder
            .dispatch(
                Dispatch::new(&kernel)
                    .read(&a)
                    .write(&b)
                    .cost(8 * n as u64, n as u64)
                    .op_kind(OpKind::Rope),
            )
            .unwrap();
        encoder.set_scope("lm_head");
        encoder
            .dispatch(
                Dispatch::new(&kernel)
                    .read(&b)
                    .write(&a)
                    .cost(8 * n as u64, n as u64)
                    .op_kind(OpKind::MatVec),
            )
            .unwrap();
        encoder.commit_and_wait_labeled("token").unwrap();
        device.profiler().end_token();
    }
    device.profile(device.conditions("eager", Some("test".into()), Some(50.0)))
}

#[test]
fn json_profile_round_trips() {
    let profile = recorded_profile();
    assert_eq!(profile.schema, 2);
    assert_eq!(profile.dispatches.len(), 6);
    let text = profile.to_json();
    assert!(text.contains("\"schema\": 2"));
    assert_eq!(Profile::from_json(&text, Path::new("p.json")).unwrap(), profile);

    let path = std::env::temp_dir().join(format!("kernelscope-roundtrip-{}.json", std::process::id()));
    profile.save(&path).unwrap();
    assert_eq!(Profile::load(&path).unwrap(), profile);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn bad_profiles_are_refused_with_the_reason() {
    let wrong_schema = recorded_profile()
        .to_json()
        .replacen("\"schema\": 2", "\"schema\": 3", 1);
    let problem = |text: &str| {
        Profile::from_json(text, Path::new("runs/p.json"))
            .unwrap_err()
            .to_string()
    };
    assert!(problem(&wrong_schema).starts_with("runs/p.json: profile schema 3 is not supported"));
    assert!(problem("{\"a\": 1}").contains("no \"schema\" field"));
    assert!(problem("not json").starts_with("runs/p.json: not JSON"));
    assert!(problem("{\"schema\": 2}").starts_with("runs/p.json: malformed profile"));
    assert!(problem("{\"schema\": 1}").starts_with("runs/p.json: malformed profile"));
    let missing = std::path::Path::new("/nonexistent/profile.json");
    let error = Profile::load(missing).unwrap_err();
    assert!(matches!(error, Error::ProfileFile { .. }));
    assert!(
        error
            .to_string()
            .starts_with("/nonexistent/profile.json: cannot read"),
        "{error}"
    );
}

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
        assert_eq!(event["args"]["op_kind"], record.op_kind.name());
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
fn human_report_has_its_sections() {
    let report = render_report(&recorded_profile());
    for needle in [
        "tokens: 0 prefill, 3 decode",
        "first: token 0",
        "last: token 2",
        "per op, over 3 tokens",
        "| Rope",
        "| MatVec",
        "per layer",
        "| layer.0",
        "| lm_head",
        "roofline: peak bandwidth 50.0 GB/s (copy probe), peak compute unknown",
        "FLOP/B",
        "bound",
        "% of peak",
        "submissions by label",
        "| token",
        "counters:",
        "| dispatches",
        "per decode token",
        "cross-check token: dispatch sum",
    ] {
        assert!(report.contains(needle), "missing `{needle}` in:\n{report}");
    }
}

#[test]
fn cross_check_flags_drift_beyond_ten_percent() {
    let mut profile = synthetic_profile(4, 1.0, 1);
    let checks = kernelscope::profile::cross_check(&profile);
    assert_eq!(checks.len(), 1);
    assert!(!checks[0].flagged, "{checks:?}");
    // Stretch one submission: its dispatches now cover far less than it.
    profile.submissions[0].end_ns += 10 * (profile.submissions[0].end_ns - profile.submissions[0].start_ns);
    let checks = kernelscope::profile::cross_check(&profile);
    assert!(checks[0].flagged && checks[0].drift > 0.1, "{checks:?}");
    assert!(render_report(&profile).contains("FLAGGED"));
}

#[test]
fn cross_check_splits_the_difference_into_lead_and_gaps() {
    let mut profile = synthetic_profile(3, 1.0, 4);
    let before = kernelscope::profile::cross_check(&profile)[0].clone();
    assert_eq!(
        before.lead_ns, 0,
        "synthetic submissions start with their first dispatch"
    );
    assert_eq!(
        before.submission_ns,
        before.dispatch_sum_ns + before.lead_ns + before.gaps_ns
    );
    // The device waited 0.8 µs before each submission's first dispatch
    // (the synthetic run starts 1 µs after the epoch).
    for submission in &mut profile.submissions {
        submission.start_ns -= 800;
    }
    let after = kernelscope::profile::cross_check(&profile)[0].clone();
    assert_eq!(after.lead_ns, 3 * 800);
    assert_eq!(after.gaps_ns, before.gaps_ns);
    assert_eq!(
        after.submission_ns,
        after.dispatch_sum_ns + after.lead_ns + after.gaps_ns
    );
    assert!(
        render_report(&profile).contains("before the first dispatch 0.002 ms"),
        "{}",
        render_report(&profile)
    );
}

#[test]
fn compare_finds_a_twenty_percent_slowdown() {
    let base = synthetic_profile(8, 1.0, 1);
    let slow = synthetic_profile(8, 1.2, 2);
    let comparison = compare(&base, &slow, 0.05, false).unwrap();
    assert!(comparison.regressed(), "{}", comparison.render());
    let regressed: Vec<(&str, &str)> = comparison
        .rows
        .iter()
        .filter(|row| row.verdict == Verdict::Regressed)
        .map(|row| (row.section, row.key.as_str()))
        .collect();
    for expected in [
        ("op", "MatVec"),
        ("op", "Attention"),
        ("layer", "layer.0"),
        ("submission", "decode"),
    ] {
        assert!(regressed.contains(&expected), "{expected:?} not in {regressed:?}");
    }
    assert!(comparison.render().contains("REGRESSION"));
    // Faster is an improvement, not a regression.
    let comparison = compare(&slow, &base, 0.05, false).unwrap();
    assert!(!comparison.regressed());
    assert!(comparison.rows.iter().any(|row| row.verdict == Verdict::Improved));
}

#[test]
fn compare_passes_identical_and_noisy_runs() {
    let base = synthetic_profile(8, 1.0, 1);
    assert!(!compare(&base, &base, 0.05, false).unwrap().regressed());
    // Same workload, other jitter, 1% slower: under the threshold.
    assert!(
        !compare(&base, &synthetic_profile(8, 1.01, 3), 0.05, false)
            .unwrap()
            .regressed()
    );
}

#[test]
fn compare_flags_counter_increases_exactly() {
    let base = synthetic_profile(4, 1.0, 1);
    let mut more_syncs = base.clone();
    more_syncs.tokens[3].counters.syncs += 1;
    let comparison = compare(&base, &more_syncs, 0.05, false).unwrap();
    let row = comparison.rows.iter().find(|row| row.key == "syncs").unwrap();
    assert_eq!(row.verdict, Verdict::Regressed);
    assert_eq!((row.base, row.new), (Some(1.0), Some(1.25)));
}

#[test]
fn compare_judges_concurrency_by_its_share_of_dispatches() {
    let base = synthetic_profile(4, 1.0, 1);
    let set = |profile: &mut Profile, dispatches: u64, concurrent: u64| {
        for token in &mut profile.tokens {
            token.counters.dispatches = dispatches;
            token.counters.concurrent = concurrent;
        }
    };
    let verdict_of = |base: &Profile, new: &Profile| {
        let comparison = compare(base, new, 0.05, false).unwrap();
        comparison
            .rows
            .iter()
            .find(|row| row.key == "concurrent")
            .unwrap()
            .verdict
    };
    let mut unfused = base.clone();
    set(&mut unfused, 277, 113);
    // Fused: fewer dispatches, fewer independent ones, a larger share.
    let mut fused = base.clone();
    set(&mut fused, 116, 49);
    assert_eq!(verdict_of(&unfused, &fused), Verdict::Improved);
    // The same dispatches with fewer independent among them is a loss.
    let mut serialised = base.clone();
    set(&mut serialised, 277, 112);
    assert_eq!(verdict_of(&unfused, &serialised), Verdict::Regressed);
    // The same share is the same.
    let mut doubled = base.clone();
    set(&mut doubled, 554, 226);
    assert_eq!(verdict_of(&unfused, &doubled), Verdict::Same);
}

#[test]
fn compare_refuses_mismatched_conditions_unless_forced() {
    let base = synthetic_profile(4, 1.0, 1);
    let mut other = base.clone();
    other.conditions.mode = "graph".into();
    other.conditions.device = "cuda:0 NVIDIA H200".into();
    let error = compare(&base, &other, 0.05, false).unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, Error::ConditionsDiffer { .. }));
    assert!(
        message.contains("mode: eager vs graph") && error.remedies() == [kernelscope::Remedy::Force],
        "{message}"
    );
    let forced = compare(&base, &other, 0.05, true).unwrap();
    assert!(
        forced
            .notes
            .iter()
            .any(|note| note.contains("different conditions"))
    );
}

#[test]
fn differing_peaks_are_noted_never_refused() {
    let base = synthetic_profile(4, 1.0, 1);
    let mut other = synthetic_profile(4, 1.0, 2);
    // Within the noise of the probes: nothing to say.
    other.conditions.peak_compute_gflops = Some(5000.0 * 1.05);
    let comparison = compare(&base, &other, 0.05, false).unwrap();
    assert!(
        comparison.notes.iter().all(|note| !note.contains("peak")),
        "{:?}",
        comparison.notes
    );
    // A device that ran 30% slower: compared, and the reader is told.
    other.conditions.peak_compute_gflops = Some(3500.0);
    other.conditions.peak_bandwidth_gbps = None;
    let comparison = compare(&base, &other, 0.05, false).unwrap();
    let peak_notes: Vec<&String> = comparison
        .notes
        .iter()
        .filter(|note| note.contains("peak"))
        .collect();
    assert_eq!(peak_notes.len(), 1, "{peak_notes:?}");
    assert!(
        peak_notes[0].contains("peak compute measured 5000.0 GFLOP/s for the base and 3500.0 GFLOP/s")
            && peak_notes[0].contains("-30.0%"),
        "{}",
        peak_notes[0]
    );
    assert!(comparison.render().contains("note: peak compute measured"));
}

#[test]
fn gated_submissions_and_host_enqueue_are_reported() {
    let mut profile = synthetic_profile(4, 1.0, 3);
    let plain = render_report(&profile);
    assert!(
        !plain.contains("host enqueue"),
        "no enqueue column where nothing was measured:\n{plain}"
    );
    // Two of the submissions were held until enqueued, each after 250 µs
    // of host launching; the others report their enqueue time only.
    for (position, submission) in profile.submissions.iter_mut().enumerate() {
        submission.enqueue = Some(kernelscope::profile::Enqueue {
            host_ns: 250_000 + position as u64 * 1_000,
            device_held: position % 2 == 0,
        });
    }
    let check = kernelscope::profile::cross_check(&profile)[0].clone();
    assert_eq!(check.device_held, 2);
    assert_eq!(check.host_enqueue_ns, 4 * 250_000 + 6_000);
    let report = render_report(&profile);
    for needle in [
        "host enqueue µs (mean)",
        "|                  251.5 |",
        "2 of 4 submissions held until fully enqueued (host enqueue 1.006 ms in all)",
    ] {
        assert!(report.contains(needle), "missing `{needle}` in:\n{report}");
    }
    // The enqueue survives JSON.
    assert_eq!(
        Profile::from_json(&profile.to_json(), Path::new("p.json")).unwrap(),
        profile
    );
}

/// A profile as schema 1 wrote it: prose timing methods, and enqueue fields
/// on every submission (0 and false where nothing was enqueued).
fn as_schema_1(profile: &Profile, submission_method: &str, dispatch_method: &str) -> serde_json::Value {
    let mut older: serde_json::Value = serde_json::from_str(&profile.to_json()).unwrap();
    older["schema"] = serde_json::json!(1);
    older["conditions"]["submission_timing"] = serde_json::json!(submission_method);
    older["conditions"]["dispatch_timing"] =
        serde_json::json!({"support": "supported", "method": dispatch_method});
    for submission in older["submissions"].as_array_mut().unwrap() {
        let fields = submission.as_object_mut().unwrap();
        let enqueue = fields.remove("enqueue");
        let host_ns = enqueue
            .as_ref()
            .map_or(serde_json::json!(0), |e| e["host_ns"].clone());
        let held = enqueue
            .as_ref()
            .map_or(serde_json::json!(false), |e| e["device_held"].clone());
        fields.insert("host_enqueue_ns".into(), host_ns);
        fields.insert("gated".into(), held);
    }
    older
}

#[test]
fn schema_1_profiles_read_as_schema_2_and_compare_by_method_not_prose() {
    use kernelscope::profile::{DispatchTiming, Enqueue, TimingMechanism};
    let mut profile = synthetic_profile(4, 1.0, 3);
    profile.submissions[1].enqueue = Some(Enqueue {
        host_ns: 1_234,
        device_held: true,
    });
    let older = as_schema_1(&profile, "host clock", "host clock");
    let read = Profile::from_json(&older.to_string(), Path::new("older.json")).unwrap();
    assert_eq!(read.schema, kernelscope::profile::PROFILE_SCHEMA_VERSION);
    assert_eq!(
        read.submissions, profile.submissions,
        "enqueue kept where measured, None elsewhere"
    );
    assert_eq!(read.conditions, profile.conditions);

    // CUPTI before and after the enqueue gate are different methods; the
    // event fallback's note (why CUPTI was missing) decides nothing.
    let gated = "cupti activity records (eager launches and graph replays; replays timed from the end of the host's enqueue)";
    let cupti_before_gate = as_schema_1(
        &profile,
        "cuda event pairs",
        "cupti activity records (eager launches and graph replays)",
    );
    let cupti_after_gate = as_schema_1(&profile, "cuda event pairs", gated);
    let before = Profile::from_json(&cupti_before_gate.to_string(), Path::new("a.json")).unwrap();
    let after = Profile::from_json(&cupti_after_gate.to_string(), Path::new("b.json")).unwrap();
    assert_eq!(
        after.conditions.dispatch_timing,
        DispatchTiming::supported(TimingMechanism::Cupti)
    );
    assert!(
        before
            .conditions
            .differences(&after.conditions)
            .iter()
            .any(|difference| difference.starts_with("dispatch timing")),
        "revisions differ"
    );
    let events_a = as_schema_1(
        &profile,
        "cuda event pairs",
        "cuda event pairs around eager launches (CUPTI unavailable: no libcupti)",
    );
    let events_b = as_schema_1(
        &profile,
        "cuda event pairs",
        "cuda event pairs around eager launches (CUPTI unavailable: the driver refused)",
    );
    let a = Profile::from_json(&events_a.to_string(), Path::new("a.json")).unwrap();
    let b = Profile::from_json(&events_b.to_string(), Path::new("b.json")).unwrap();
    assert!(a.conditions.differences(&b.conditions).is_empty());

    let unknown = as_schema_1(&profile, "sundial", "host clock");
    let error = Profile::from_json(&unknown.to_string(), Path::new("odd.json")).unwrap_err();
    assert!(
        error.to_string().contains("conditions.submission_timing"),
        "{error}"
    );
}

/// The report's row for `key` in the table that follows `section`, as cells.
fn table_row(report: &str, section: &str, key: &str) -> Vec<String> {
    let table = &report[report
        .find(section)
        .unwrap_or_else(|| panic!("no `{section}` in:\n{report}"))..];
    let line = table
        .lines()
        .find(|line| line.split('|').nth(1).is_some_and(|cell| cell.trim() == key))
        .unwrap_or_else(|| panic!("no row `{key}` after `{section}` in:\n{report}"));
    line.split('|')
        .map(|cell| cell.trim().to_string())
        .filter(|cell| !cell.is_empty())
        .collect()
}

#[test]
fn roofline_columns_classify_memory_and_compute_bound_ops() {
    // Attention made compute-heavy: 128 MFLOP per MiB, past the synthetic
    // device's ridge point (5000 GFLOP/s / 100 GB/s = 50 FLOP/B); MatVec
    // stays at 0.5 FLOP/B, RmsNorm declares no flops at all.
    let mut profile = synthetic_profile(4, 1.0, 7);
    for record in &mut profile.dispatches {
        match record.op_kind {
            OpKind::Attention => record.flops = 1 << 27,
            OpKind::RmsNorm => record.flops = 0,
            _ => {}
        }
    }
    let (peak_gbps, peak_gflops) = (100.0, 5000.0);
    assert_eq!(profile.conditions.peak_bandwidth_gbps, Some(peak_gbps));
    assert_eq!(profile.conditions.peak_compute_gflops, Some(peak_gflops));
    assert_eq!(profile.conditions.ridge_point(), Some(50.0));
    let totals = |kind: OpKind| {
        profile
            .dispatches
            .iter()
            .filter(|record| record.op_kind == kind)
            .fold((0u64, 0u64, 0u64), |(ns, bytes, flops), record| {
                (
                    ns + record.end_ns - record.start_ns,
                    bytes + record.bytes,
                    flops + record.flops,
                )
            })
    };
    let report = render_report(&profile);
    assert!(
        report.contains(
            "roofline: peak bandwidth 100.0 GB/s (copy probe), peak compute 5000.0 GFLOP/s (bf16 GEMM probe); ridge point 50.00 FLOP/B"
        ),
        "{report}"
    );

    // Compute-bound: GFLOP/s against the compute peak.
    let (ns, bytes, flops) = totals(OpKind::Attention);
    let gflops = flops as f64 / ns as f64;
    let row = table_row(&report, "per op,", "Attention");
    assert_eq!(row[6], format!("{gflops:.1}"), "GFLOP/s: {row:?}");
    assert_eq!(
        row[7],
        format!("{:.2}", flops as f64 / bytes as f64),
        "FLOP/B: {row:?}"
    );
    assert_eq!(row[7], "128.00");
    assert_eq!(row[8], "compute", "{row:?}");
    assert_eq!(
        row[9],
        format!("{:.1}% FLOP/s", 100.0 * gflops / peak_gflops),
        "{row:?}"
    );

    // Memory-bound: GB/s against the bandwidth peak.
    let (ns, bytes, flops) = totals(OpKind::MatVec);
    let gbps = bytes as f64 / ns as f64;
    let row = table_row(&report, "per op,", "MatVec");
    assert_eq!(row[5], format!("{gbps:.1}"), "GB/s: {row:?}");
    assert_eq!(
        row[6],
        format!("{:.1}", flops as f64 / ns as f64),
        "GFLOP/s: {row:?}"
    );
    assert_eq!(row[7], "0.50", "FLOP/B: {row:?}");
    assert_eq!(row[8], "memory", "{row:?}");
    assert_eq!(row[9], format!("{:.1}% BW", 100.0 * gbps / peak_gbps), "{row:?}");

    // No flops: memory-bound whatever the ridge point, no GFLOP/s.
    let row = table_row(&report, "per op,", "RmsNorm");
    assert_eq!(
        (row[6].as_str(), row[7].as_str(), row[8].as_str()),
        ("-", "-", "memory")
    );
    assert!(row[9].ends_with("% BW"), "{row:?}");

    // Kernels are classified alike.
    let row = table_row(&report, "per kernel,", "attention_f32");
    assert_eq!(row[8], "compute", "{row:?}");

    // A layer holds both kinds: mixed, against the time its dispatches
    // would take at their own bounds; its summed bytes and flops (42.83
    // FLOP/B, below the ridge) would have called it all memory-bound.
    let layer: Vec<_> = profile
        .dispatches
        .iter()
        .filter(|record| record.scope.starts_with("layer.0."))
        .collect();
    let at_bounds_ns: f64 = layer
        .iter()
        .map(|record| match record.op_kind {
            OpKind::Attention => record.flops as f64 / peak_gflops,
            _ => record.bytes as f64 / peak_gbps,
        })
        .sum();
    let taken_ns: u64 = layer.iter().map(|record| record.end_ns - record.start_ns).sum();
    let row = table_row(&report, "per layer,", "layer.0");
    assert_eq!(row[7], "42.83", "{row:?}");
    assert_eq!(row[8], "mixed", "{row:?}");
    assert_eq!(
        row[9],
        format!("{:.1}% roofline", 100.0 * at_bounds_ns / taken_ns as f64),
        "{row:?}"
    );

    // An unknown compute peak is said, never guessed: work with flops is
    // unclassified and shows the bandwidth it reached, named as such.
    profile.conditions.peak_compute_gflops = None;
    let report = render_report(&profile);
    assert!(
        report.contains("peak compute unknown (GEMM probe not run)") && report.contains("no ridge point"),
        "{report}"
    );
    let row = table_row(&report, "per op,", "Attention");
    assert_eq!(row[8], "?", "{row:?}");
    let (ns, bytes, _) = totals(OpKind::Attention);
    assert_eq!(
        row[9],
        format!("{:.1}% BW", 100.0 * bytes as f64 / ns as f64 / peak_gbps)
    );
    assert_eq!(table_row(&report, "per op,", "RmsNorm")[8], "memory");
}

/// Every profile kept in tests/fixtures/profiles (a real GPU run, a CPU
/// run, a split CPU run, a schema-1 file the reader upgrades) renders as the
/// short and full text report and as the HTML page, and compares with
/// itself: no regression, and the comparison page renders too.
#[test]
fn every_fixture_profile_renders_and_compares() {
    use kernelscope::profile::{ReportOptions, render_comparison_html, render_html, render_report_with};
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/profiles");
    let mut seen = 0;
    for entry in std::fs::read_dir(&folder).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|extension| extension != "json") {
            continue;
        }
        seen += 1;
        let name = path.display().to_string();
        let profile = Profile::load(&path).unwrap_or_else(|error| panic!("{error}"));
        assert!(!profile.dispatches.is_empty(), "{name}");
        let short = render_report_with(&profile, ReportOptions::SHORT);
        let full = render_report_with(&profile, ReportOptions::FULL);
        assert!(short.starts_with("kernelscope profile"), "{name}");
        assert!(
            short.lines().count() < full.lines().count(),
            "{name}: folding shortens"
        );
        let html = render_html(&profile);
        assert!(html.contains(r#"<svg class="layers""#), "{name}");
        let comparison = compare(&profile, &profile, 0.05, false).unwrap();
        assert!(!comparison.regressed(), "{name}");
        assert!(
            render_comparison_html(&profile, &profile, &comparison, ("a", "b")).contains("no regression")
        );
    }
    assert_eq!(seen, 4, "the fixtures");
}
