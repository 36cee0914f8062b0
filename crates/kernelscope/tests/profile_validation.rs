//! Hostile profiles: `Profile::from_json` refuses every profile that does
//! not hold together (a span ending before it starts, a dispatch without its
//! submission, sums past 2^64, ...) with a message naming the file and the
//! record, and what reads a profile here (comparison, cross-check) never
//! panics or wraps around on a forged one built in memory; the renderings
//! of such profiles are tested in kernelscope-report.

use std::path::Path;

use kernelscope::Error;
use kernelscope::profile::{
    BandwidthBasis, Ceiling, CounterSnapshot, Enqueue, Profile, compare, cross_check,
};
use kernelscope::rng::SplitMix64;
use kernelscope::testing::synthetic_profile;

/// A valid synthetic profile of `tokens` decode tokens, with seeded timings.
fn profile(tokens: u32, seed: u64) -> Profile {
    synthetic_profile(tokens, 1.0, seed)
}

/// The error of loading `profile` back from its JSON as `runs/bad.json`.
fn refusal(profile: &Profile) -> String {
    let error = Profile::from_json(&profile.to_json(), Path::new("runs/bad.json")).unwrap_err();
    assert!(matches!(error, Error::ProfileFile { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.starts_with("runs/bad.json: "), "{message}");
    assert_eq!(message.lines().count(), 1, "{message}");
    message
}

fn assert_contains(message: &str, needles: &[&str]) {
    for needle in needles {
        assert!(message.contains(needle), "missing `{needle}` in: {message}");
    }
}

#[test]
fn valid_profiles_load_unchanged() {
    for seed in 0..4 {
        let original = profile(3 + seed as u32, seed);
        let loaded = Profile::from_json(&original.to_json(), Path::new("ok.json")).unwrap();
        assert_eq!(loaded, original);
    }
}

#[test]
fn spans_that_end_before_they_start_are_refused_by_record() {
    let mut rng = SplitMix64::new(7);
    let base = profile(6, 7);

    let mut bad = base.clone();
    let token = rng.below(bad.tokens.len() as u64) as usize;
    let start = bad.tokens[token].start_ns;
    bad.tokens[token].end_ns = start - 1 - rng.below(500);
    let end = bad.tokens[token].end_ns;
    assert_contains(
        &refusal(&bad),
        &[&format!(
            "tokens[{token}]: end_ns {end} is before start_ns {start}"
        )],
    );

    let mut bad = base.clone();
    let submission = rng.below(bad.submissions.len() as u64) as usize;
    bad.submissions[submission].end_ns = bad.submissions[submission].start_ns - 1;
    assert_contains(
        &refusal(&bad),
        &[&format!("submissions[{submission}]: end_ns"), "before start_ns"],
    );

    let mut bad = base;
    let dispatch = rng.below(bad.dispatches.len() as u64) as usize;
    bad.dispatches[dispatch].end_ns = 0;
    assert_contains(
        &refusal(&bad),
        &[&format!("dispatches[{dispatch}]: end_ns 0 is before")],
    );
}

#[test]
fn ids_that_do_not_hold_together_are_refused_by_record() {
    let base = profile(4, 11);
    let last = base.dispatches.len() - 1;

    let mut bad = base.clone();
    bad.tokens[2].index = bad.tokens[0].index;
    assert_contains(
        &refusal(&bad),
        &["tokens[2]: token index 0 is also the index of tokens[0]"],
    );

    let mut bad = base.clone();
    bad.submissions[3].submission = bad.submissions[1].submission;
    assert_contains(
        &refusal(&bad),
        &["submissions[3]: submission 1 is also", "submissions[1]"],
    );

    let mut bad = base.clone();
    bad.dispatches[last].submission = 99;
    assert_contains(
        &refusal(&bad),
        &[&format!("dispatches[{last}]: submission 99 is not among")],
    );

    let mut bad = base.clone();
    bad.dispatches[0].index = 6;
    assert_contains(
        &refusal(&bad),
        &["dispatches[0]: index 6 is past the 6 dispatches of submissions[0]"],
    );

    let mut bad = base.clone();
    bad.dispatches[1].index = 0;
    assert_contains(
        &refusal(&bad),
        &["dispatches[1]: dispatch 0 of submission 0 is also dispatches[0]"],
    );

    let mut bad = base.clone();
    bad.dispatches[2].label = "prefill\nnext line".into();
    let message = refusal(&bad);
    assert_contains(
        &message,
        &["dispatches[2]: label \"prefill\\nnext line\" differs from \"decode\""],
    );

    let mut bad = base;
    bad.dispatches[3].token = Some(3);
    assert_contains(
        &refusal(&bad),
        &["dispatches[3]: token Some(3) differs from token Some(0) of submissions[0]"],
    );
}

#[test]
fn sums_past_u64_are_refused_instead_of_wrapping() {
    let base = profile(3, 5);

    // Counters: half of u64::MAX and a bit, twice.
    let mut bad = base.clone();
    for token in &mut bad.tokens[..2] {
        token.counters.syncs = u64::MAX / 2 + 1;
    }
    assert_contains(
        &refusal(&bad),
        &["tokens[1]: the token counters add up past 2^64"],
    );

    let mut bad = base.clone();
    bad.tokens[0].end_ns = u64::MAX;
    bad.tokens[0].start_ns = 0;
    assert_contains(&refusal(&bad), &["tokens[1]: the token times add up past 2^64"]);

    let mut bad = base.clone();
    bad.submissions[0].start_ns = 0;
    bad.submissions[0].end_ns = u64::MAX - 10;
    assert_contains(
        &refusal(&bad),
        &["submissions[1]: the submission times add up past 2^64"],
    );

    let mut bad = base.clone();
    bad.submissions[2].enqueue = Some(Enqueue {
        host_ns: u64::MAX,
        device_held: false,
    });
    bad.submissions[1].enqueue = Some(Enqueue {
        host_ns: 1,
        device_held: false,
    });
    assert_contains(
        &refusal(&bad),
        &["submissions[2]: the host enqueue times add up past 2^64"],
    );

    let mut bad = base.clone();
    bad.dispatches[0].start_ns = 0;
    bad.dispatches[0].end_ns = u64::MAX;
    assert_contains(
        &refusal(&bad),
        &["dispatches[1]: the dispatch times add up past 2^64"],
    );

    let mut bad = base.clone();
    bad.dispatches[4].bytes = u64::MAX - 3;
    assert_contains(
        &refusal(&bad),
        &["dispatches[4]: the dispatch bytes add up past 2^64"],
    );

    let mut bad = base;
    bad.dispatches[5].flops = u64::MAX;
    assert_contains(
        &refusal(&bad),
        &["dispatches[5]: the dispatch flops add up past 2^64"],
    );
}

#[test]
fn a_ceiling_that_is_not_positive_is_refused() {
    let mut rng = SplitMix64::new(0x6365_696c);
    for name in [
        "read",
        "write",
        "copy",
        "compute",
        "physical_bandwidth",
        "physical_compute",
    ] {
        for value in [0.0, -f64::from(rng.uniform(0.1, 1e4))] {
            let mut bad = profile(2, rng.next_u64());
            let ceiling = Some(Ceiling::new(value, "hostile"));
            let ceilings = &mut bad.conditions.ceilings;
            match name {
                "read" => ceilings.read = ceiling,
                "write" => ceilings.write = ceiling,
                "copy" => ceilings.copy = ceiling,
                "compute" => ceilings.compute = ceiling,
                "physical_bandwidth" => ceilings.physical_bandwidth = ceiling,
                _ => ceilings.physical_compute = ceiling,
            }
            assert_contains(
                &refusal(&bad),
                &[&format!("conditions.ceilings.{name}"), "not a positive, finite"],
            );
        }
    }
    // JSON has no NaN or infinity; a number too large for f64 is refused by the parser.
    let text = profile(2, 3)
        .to_json()
        .replacen("\"value\": 100.0", "\"value\": 1e999", 1);
    assert!(text.contains("1e999"));
    assert!(Profile::from_json(&text, Path::new("x.json")).is_err());
}

/// `profile` as a schema-2 file wrote it: one copy bandwidth and a compute
/// rate in place of the ceilings, dispatches without their written bytes.
fn as_schema_2(profile: &Profile, copy_gbps: Option<f64>, compute_gflops: Option<f64>) -> serde_json::Value {
    let mut older: serde_json::Value = serde_json::from_str(&profile.to_json()).unwrap();
    older["schema"] = serde_json::json!(2);
    let conditions = older["conditions"].as_object_mut().unwrap();
    assert!(conditions.remove("ceilings").is_some());
    conditions.insert("peak_bandwidth_gbps".into(), serde_json::json!(copy_gbps));
    if let Some(gflops) = compute_gflops {
        conditions.insert("peak_compute_gflops".into(), serde_json::json!(gflops));
    }
    for dispatch in older["dispatches"].as_array_mut().unwrap() {
        assert!(
            dispatch
                .as_object_mut()
                .unwrap()
                .remove("bytes_written")
                .is_some()
        );
    }
    older
}

#[test]
fn schema_2_profiles_load_with_their_figure_as_a_copy_ceiling() {
    let mut rng = SplitMix64::new(0x0032_0033);
    let current = profile(3, rng.next_u64());
    assert_eq!(current.schema, 4);
    let copy_gbps = f64::from(rng.uniform(10.0, 5000.0));
    let compute_gflops = f64::from(rng.uniform(100.0, 1e6));
    let older = as_schema_2(&current, Some(copy_gbps), Some(compute_gflops));
    let read = Profile::from_json(&older.to_string(), Path::new("older.json")).unwrap();
    assert_eq!(read.schema, 4, "upgraded on load");
    let ceilings = &read.conditions.ceilings;
    assert_eq!(ceilings.copy.as_ref().map(|copy| copy.value), Some(copy_gbps));
    assert!(ceilings.copy.as_ref().unwrap().method.contains("schema-2"));
    assert_eq!(ceilings.compute_gflops(), Some(compute_gflops));
    assert_eq!((ceilings.read.as_ref(), ceilings.write.as_ref()), (None, None));
    assert_eq!(ceilings.bandwidth(), Some((copy_gbps, BandwidthBasis::Copy)));
    assert_eq!(read.conditions.ridge_point(), Some(compute_gflops / copy_gbps));
    // Its dispatches are judged by their whole bytes at the copy ceiling.
    let roofline = kernelscope::profile::Roofline::of(&read.conditions);
    for dispatch in &read.dispatches {
        assert_eq!(dispatch.bytes_written, 0);
        assert_eq!(
            roofline.memory_floor_ns(dispatch.bytes, dispatch.bytes_written),
            Some(dispatch.bytes as f64 / copy_gbps)
        );
    }
    let mut expected = current.clone();
    expected.conditions.ceilings = read.conditions.ceilings.clone();
    for dispatch in &mut expected.dispatches {
        dispatch.bytes_written = 0;
    }
    assert_eq!(read, expected, "nothing else changes");
    // Old and new compare, with a note that their shares of peak do not.
    let comparison = compare(&read, &current, 0.05, false).unwrap();
    assert!(
        comparison.notes.iter().any(|note| note.contains("copy ceiling")),
        "{:?}",
        comparison.notes
    );
    // A schema-2 file without a compute rate (older still) loads with it unknown.
    let oldest = as_schema_2(&current, Some(copy_gbps), None);
    let read = Profile::from_json(&oldest.to_string(), Path::new("oldest.json")).unwrap();
    assert_eq!(read.conditions.ceilings.compute, None);
    assert_eq!(read.conditions.ridge_point(), None);
    assert!(compare(&read, &current, 0.05, false).is_ok());
}

#[test]
fn schema_2_peaks_that_are_not_positive_are_refused_by_their_own_name() {
    let current = profile(2, 9);
    for (copy, compute, field) in [
        (Some(-3.5), None, "conditions.peak_bandwidth_gbps"),
        (Some(10.0), Some(0.0), "conditions.peak_compute_gflops"),
    ] {
        let older = as_schema_2(&current, copy, compute);
        let error = Profile::from_json(&older.to_string(), Path::new("older.json")).unwrap_err();
        assert_contains(&error.to_string(), &[field, "not a positive, finite"]);
    }
}

#[test]
fn current_profiles_round_trip_with_every_ceiling_and_split() {
    let mut rng = SplitMix64::new(0x7274_7269);
    let mut current = profile(3, rng.next_u64());
    current.conditions.ceilings.physical_bandwidth = Some(Ceiling::new(
        f64::from(rng.uniform(100.0, 9000.0)),
        "memory clock × 2 × bus width",
    ));
    for dispatch in &mut current.dispatches {
        dispatch.bytes_written = rng.below(dispatch.bytes + 1);
    }
    let text = current.to_json();
    assert!(
        !text.contains("peak_bandwidth_gbps"),
        "the old field is not written"
    );
    let read = Profile::from_json(&text, Path::new("current.json")).unwrap();
    assert_eq!(read, current);
    // Written bytes beyond the bytes moved do not hold together.
    let mut bad = current;
    bad.dispatches[1].bytes_written = bad.dispatches[1].bytes + 1;
    assert_contains(&refusal(&bad), &["dispatches[1]", "bytes_written"]);
}

#[test]
fn counter_sums_check_or_saturate() {
    let mut rng = SplitMix64::new(3);
    let small = CounterSnapshot {
        dispatches: rng.below(1000),
        syncs: rng.below(1000),
        ..Default::default()
    };
    let sum = small.checked_add(small).unwrap();
    assert_eq!(sum.dispatches, 2 * small.dispatches);
    assert_eq!(small + small, sum);
    let huge = CounterSnapshot {
        barriers: u64::MAX - rng.below(10),
        ..Default::default()
    };
    let eleven_barriers = CounterSnapshot {
        barriers: 11,
        ..small
    };
    assert_eq!(huge.checked_add(eleven_barriers), None);
    let held = huge + eleven_barriers;
    assert_eq!(
        held.barriers,
        u64::MAX,
        "held at the top, not wrapped to a small count"
    );
    assert_eq!(held.syncs, small.syncs);
}

#[test]
fn readers_of_a_forged_profile_saturate_rather_than_wrap_or_panic() {
    // Built in memory, never loaded: nothing refused it, and every reader
    // still has to stay sane (debug builds panic on a wrapping `+`).
    let mut forged = profile(3, 9);
    for dispatch in &mut forged.dispatches {
        dispatch.start_ns = 0;
        dispatch.end_ns = u64::MAX;
        dispatch.bytes = u64::MAX;
        dispatch.flops = u64::MAX;
    }
    for submission in &mut forged.submissions {
        submission.start_ns = 0;
        submission.end_ns = u64::MAX;
        submission.enqueue = Some(Enqueue {
            host_ns: u64::MAX,
            device_held: true,
        });
    }
    for token in &mut forged.tokens {
        token.start_ns = 0;
        token.end_ns = u64::MAX;
        token.counters.dispatches = u64::MAX;
    }
    let checks = cross_check(&forged);
    assert_eq!(checks[0].dispatch_sum_ns, u64::MAX);
    assert_eq!(checks[0].host_enqueue_ns, u64::MAX);
    let comparison = compare(&forged, &forged, 0.05, false).unwrap();
    assert!(!comparison.regressed(), "{:?}", comparison.rows);
    let (count, sum) = forged
        .phase_counters(kernelscope::profile::Phase::Decode)
        .unwrap();
    assert_eq!((count, sum.dispatches), (3, u64::MAX));
}

#[test]
fn a_profile_of_many_tokens_and_scopes_compares_row_by_row() {
    // Each dispatch in its own scope, over many tokens: every scope is a
    // row. How fast is benches/large_profiles.rs's to say (the per-layer
    // totals once grew with the square of such a profile).
    let mut many = profile(2_000, 13);
    for (position, dispatch) in many.dispatches.iter_mut().enumerate() {
        dispatch.scope = format!("layer.{position}.attn").into();
    }
    let text = many.to_json();
    let loaded = Profile::from_json(&text, Path::new("many.json")).unwrap();
    let comparison = compare(&loaded, &loaded, 0.05, false).unwrap();
    assert!(!comparison.regressed());
    assert!(
        comparison
            .rows
            .iter()
            .filter(|row| row.section == "layer")
            .count()
            >= 12_000
    );
}

/// A split run's profile: valid with its topology, refused (naming what)
/// without one, with a topology of another size, with ranks out of order,
/// or with a rank whose own records do not hold together.
#[test]
fn split_profiles_are_checked_rank_by_rank() {
    use kernelscope::profile::Topology;
    let topology = |ranks: usize| Topology {
        ranks,
        devices: (0..ranks).map(|rank| format!("cpu {rank}")).collect(),
        library: "in-process".into(),
        link: "shared memory".into(),
    };
    let split = profile(3, 7).with_ranks(topology(2), vec![(profile(3, 8), 1_500)]);
    let loaded = Profile::from_json(&split.to_json(), Path::new("runs/split.json")).unwrap();
    assert_eq!(loaded, split);
    // Rank 1's times moved onto rank 0's clock.
    assert_eq!(
        split.ranks[0].tokens[0].start_ns,
        profile(3, 8).tokens[0].start_ns + 1_500
    );

    let mut no_topology = split.clone();
    no_topology.conditions.topology = None;
    assert_contains(&refusal(&no_topology), &["ranks", "topology is absent"]);

    let mut wrong_size = split.clone();
    wrong_size.conditions.topology = Some(topology(3));
    assert_contains(&refusal(&wrong_size), &["conditions.topology", "3 ranks"]);

    let mut renumbered = split.clone();
    renumbered.ranks[0].rank = 2;
    assert_contains(&refusal(&renumbered), &["ranks[0]", "rank 2 where 1 was due"]);

    let mut broken = split.clone();
    let token = &mut broken.ranks[0].tokens[1];
    token.end_ns = token.start_ns - 1;
    assert_contains(&refusal(&broken), &["ranks[0] (rank 1)", "tokens[1]"]);
}

#[test]
fn a_stored_idle_split_is_recomputed_not_refused() {
    // Idle is derived from the dispatches: one stored 1 ns off (rounding in
    // another tool), or made up, is replaced on load, never an error.
    let original = profile(6, 23);
    let expected: Vec<_> = original
        .submissions
        .iter()
        .map(|submission| submission.idle)
        .collect();
    assert!(expected.iter().all(Option::is_some));
    let mut edited = original.clone();
    if let Some(idle) = edited.submissions[0].idle.as_mut() {
        idle.busy_ns += 1;
    }
    if let Some(idle) = edited.submissions[1].idle.as_mut() {
        idle.between_ns += 1_000_000;
    }
    let loaded = Profile::from_json(&edited.to_json(), Path::new("runs/edited.json")).unwrap();
    let found: Vec<_> = loaded
        .submissions
        .iter()
        .map(|submission| submission.idle)
        .collect();
    assert_eq!(found, expected);
}
