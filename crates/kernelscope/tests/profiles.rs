//! Profiles: the JSON profile round-trips and refuses other schemas (and
//! reads schema 1), the cross-check measures drift and where it went, and
//! compare finds a 20% slowdown, passes identical runs and refuses
//! mismatched conditions. How they render is kernelscope-report's to test.

mod common;

use std::path::Path;

use kernelscope::profile::{Profile, ProfileLevel, Verdict, compare};
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
                    .cost(4 * n as u64, 4 * n as u64, n as u64)
                    .op_kind(OpKind::Rope),
            )
            .unwrap();
        encoder.set_scope("lm_head");
        encoder
            .dispatch(
                Dispatch::new(&kernel)
                    .read(&b)
                    .write(&a)
                    .cost(4 * n as u64, 4 * n as u64, n as u64)
                    .op_kind(OpKind::MatVec),
            )
            .unwrap();
        encoder.commit_and_wait_labeled("token").unwrap();
        device.profiler().end_token();
    }
    device.profile(device.conditions("eager", Some("test".into())).with_ceilings(
        kernelscope::profile::Ceilings {
            read: Some(kernelscope::profile::Ceiling::new(50.0, "test")),
            ..Default::default()
        },
    ))
}

#[test]
fn json_profile_round_trips() {
    let profile = recorded_profile();
    assert_eq!(profile.schema, 4);
    assert_eq!(profile.dispatches.len(), 6);
    let text = profile.to_json();
    assert!(text.contains("\"schema\": 4"));
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
        .replacen("\"schema\": 4", "\"schema\": 5", 1);
    let problem = |text: &str| {
        Profile::from_json(text, Path::new("runs/p.json"))
            .unwrap_err()
            .to_string()
    };
    assert!(problem(&wrong_schema).starts_with("runs/p.json: profile schema 5 is not supported"));
    assert!(problem("{\"a\": 1}").contains("no \"schema\" field"));
    assert!(problem("not json").starts_with("runs/p.json: not JSON"));
    // A struct deserializes from an array too: `[1]` once read as schema 1
    // and panicked in its upgrade (found by the profile_json fuzz target).
    for array in ["[1]", " [2, {}]", "[3]", "[4]", "\n[1, 2]"] {
        assert!(
            problem(array).contains("the top-level JSON value is not an object"),
            "{array}: {}",
            problem(array)
        );
    }
    assert!(problem("{\"schema\": 3}").starts_with("runs/p.json: malformed profile"));
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

/// Two runs split over two ranks, rank 1 slower in the second: `compare`
/// finds that rank's compute per step regressed (and the steps' imbalance
/// with it), not rank 0's.
#[test]
fn compare_finds_the_rank_that_slowed() {
    use kernelscope::profile::Topology;
    let split = |seed: u64, rank_1_slowdown: f64| {
        let topology = Topology {
            ranks: 2,
            devices: vec!["cpu 0".into(), "cpu 1".into()],
            library: "in-process".into(),
            link: "shared memory".into(),
        };
        synthetic_profile(12, 1.0, seed).with_ranks(
            topology,
            vec![(synthetic_profile(12, rank_1_slowdown, seed + 1), 0)],
        )
    };
    let comparison = compare(&split(10, 1.0), &split(20, 1.3), 0.05, false).unwrap();
    let verdict = |key: &str| {
        comparison
            .rows
            .iter()
            .find(|row| row.section == "rank" && row.key == key)
            .unwrap_or_else(|| panic!("no rank row {key} in {:?}", comparison.rows))
            .verdict
    };
    assert_eq!(verdict("rank 1 compute per step"), Verdict::Regressed);
    assert_ne!(verdict("rank 0 compute per step"), Verdict::Regressed);
    assert_eq!(verdict("imbalance per step"), Verdict::Regressed);
    for part in ["communication", "idle"] {
        for rank in 0..2 {
            verdict(&format!("rank {rank} {part} per step"));
        }
    }
    // One device: no rank rows.
    let alone = compare(
        &synthetic_profile(8, 1.0, 1),
        &synthetic_profile(8, 1.0, 2),
        0.05,
        false,
    )
    .unwrap();
    assert!(alone.rows.iter().all(|row| row.section != "rank"));
}

#[test]
fn compare_finds_a_twenty_percent_slowdown() {
    let base = synthetic_profile(8, 1.0, 1);
    let slow = synthetic_profile(8, 1.2, 2);
    let comparison = compare(&base, &slow, 0.05, false).unwrap();
    assert!(comparison.regressed(), "{:?}", comparison.rows);
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
fn differing_ceilings_are_noted_never_refused() {
    let base = synthetic_profile(4, 1.0, 1);
    let mut other = synthetic_profile(4, 1.0, 2);
    let ceiling = |value: f64| Some(kernelscope::profile::Ceiling::new(value, "test"));
    // Within the noise of the probes: nothing to say.
    other.conditions.ceilings.compute = ceiling(5000.0 * 1.05);
    other.conditions.ceilings.read = ceiling(100.0 * 0.95);
    let comparison = compare(&base, &other, 0.05, false).unwrap();
    assert!(
        comparison.notes.iter().all(|note| !note.contains("ceiling")),
        "{:?}",
        comparison.notes
    );
    // A device that computed 30% slower and wrote 25% faster: compared, and
    // the reader is told of each; a ceiling only one side has says nothing.
    other.conditions.ceilings.compute = ceiling(3500.0);
    other.conditions.ceilings.write = ceiling(100.0);
    other.conditions.ceilings.copy = None;
    let comparison = compare(&base, &other, 0.05, false).unwrap();
    let ceiling_notes: Vec<&String> = comparison
        .notes
        .iter()
        .filter(|note| note.contains("ceiling measured"))
        .collect();
    assert_eq!(ceiling_notes.len(), 2, "{ceiling_notes:?}");
    assert!(
        ceiling_notes[0].contains("write ceiling measured 80.0 GB/s for the base and 100.0 GB/s")
            && ceiling_notes[0].contains("+25.0%"),
        "{}",
        ceiling_notes[0]
    );
    assert!(
        ceiling_notes[1].contains("compute ceiling measured 5000.0 GFLOP/s for the base and 3500.0 GFLOP/s")
            && ceiling_notes[1].contains("-30.0%"),
        "{}",
        ceiling_notes[1]
    );
}

#[test]
fn gated_submissions_and_host_enqueue_are_cross_checked_and_kept() {
    let mut profile = synthetic_profile(4, 1.0, 3);
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
    // The enqueue survives JSON.
    assert_eq!(
        Profile::from_json(&profile.to_json(), Path::new("p.json")).unwrap(),
        profile
    );
}

/// A profile as schema 1 wrote it: prose timing methods, enqueue fields on
/// every submission (0 and false where nothing was enqueued), one copy
/// bandwidth for its ceilings and no written bytes.
fn as_schema_1(profile: &Profile, submission_method: &str, dispatch_method: &str) -> serde_json::Value {
    let mut older: serde_json::Value = serde_json::from_str(&profile.to_json()).unwrap();
    older["schema"] = serde_json::json!(1);
    let conditions = older["conditions"].as_object_mut().unwrap();
    conditions.remove("ceilings");
    let copy = profile.conditions.ceilings.copy.as_ref().map(|copy| copy.value);
    conditions.insert("peak_bandwidth_gbps".into(), serde_json::json!(copy));
    for dispatch in older["dispatches"].as_array_mut().unwrap() {
        dispatch.as_object_mut().unwrap().remove("bytes_written");
    }
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
fn schema_1_profiles_read_as_the_current_schema_and_compare_by_method_not_prose() {
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
    // The same conditions, but for the ceilings: schema 1 had only the copy's.
    let mut expected = profile.conditions.clone();
    expected.ceilings = kernelscope::profile::Ceilings {
        copy: read.conditions.ceilings.copy.clone(),
        ..Default::default()
    };
    assert_eq!(read.conditions, expected);
    assert_eq!(
        read.conditions.ceilings.copy.as_ref().map(|copy| copy.value),
        profile.conditions.ceilings.copy.as_ref().map(|copy| copy.value)
    );

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
