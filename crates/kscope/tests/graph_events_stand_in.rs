//! `--graphs events` end to end without a GPU: the injection library,
//! preloaded as `kscope profile --graphs events` preloads it, stands in
//! for `cudaGraphLaunch` of a stand-in CUDA runtime (`programs/
//! stand_in_cudart.c`, whose events are moments on CLOCK_MONOTONIC and whose
//! launches sleep), and `kscope profile --from-records` turns the records
//! into one whole-graph dispatch per launch, timed at least as long as it
//! slept and at most as long as the program saw the call take.
//! The launch on a stream being captured is left untimed; the library's
//! own calls keep another thread's capture intact; a forked child's exit
//! leaves the parent's records whole; a device reset reads the launches first.

mod common;

use std::path::Path;
use std::process::Command;

use kernelscope::rng::SplitMix64;
use kernelscope_trace::injection_settings;
use serde_json::Value;

/// Compiles `sources` with the system's C compiler (which Rust's own linking needs).
fn compile(arguments: &[&str], folder: &Path) {
    let output = Command::new("cc")
        .args(arguments)
        .current_dir(folder)
        .output()
        .expect("a C compiler (cc), which cargo's linking needs too");
    assert!(
        output.status.success(),
        "cc {arguments:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn graph_launches_timed_by_events_become_whole_graph_dispatches() {
    let folder = std::env::temp_dir().join(format!("kscope-graph-events-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&folder);
    let records = folder.join("records");
    std::fs::create_dir_all(&records).unwrap();
    let programs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs");
    let runtime_source = programs.join("stand_in_cudart.c");
    let program_source = programs.join("stand_in_graphs.c");
    compile(
        &[
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcudart.so.13",
            "-o",
            "libcudart.so.13",
            runtime_source.to_str().unwrap(),
        ],
        &folder,
    );
    compile(
        &[
            "-o",
            "stand_in_graphs",
            program_source.to_str().unwrap(),
            "libcudart.so.13",
            "-Wl,-rpath,$ORIGIN",
        ],
        &folder,
    );
    let mut random = SplitMix64::new(0x6576_656e_7473);
    let lengths_us: Vec<u64> = (0..6).map(|_| 1_000 + random.below(4_000)).collect();
    let output = Command::new(folder.join("stand_in_graphs"))
        .args(lengths_us.iter().map(u64::to_string))
        .env("LD_PRELOAD", common::injection_library())
        .env(injection_settings::GRAPHS_VARIABLE, "events")
        .env(injection_settings::TRACE_DIR_VARIABLE, &records)
        .env_remove(injection_settings::CUDA_INJECTION_VARIABLE)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The library's own runtime calls ran in the relaxed capture mode, the reset was the runtime's.
    assert!(
        stdout.contains("stand_in_graphs: 7 launches, 1 resets, capture intact"),
        "{stdout}"
    );

    let json = folder.join("profile.json");
    let (code, out, err) = common::kscope(&[
        "profile",
        "--from-records",
        records.to_str().unwrap(),
        "--profile-json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    // The forked child's exit left the parent's file whole (the warnings go to stderr).
    let said = format!("{out}{err}");
    assert!(
        !said.contains("garbled") && !said.contains("ended without finishing"),
        "{said}"
    );
    let profile: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let dispatches = profile["dispatches"].as_array().unwrap();
    assert_eq!(dispatches.len(), lengths_us.len(), "{out}");
    let mut previous_end = 0;
    for (index, (dispatch, &length_us)) in dispatches.iter().zip(&lengths_us).enumerate() {
        // Launch `index + 1` ran executable 0x1000 + (index + 1) % 2: graphs numbered as first seen.
        let graph = if index % 2 == 0 { 1 } else { 2 };
        assert_eq!(
            dispatch["kernel"].as_str().unwrap(),
            kernelscope_trace::whole_graph_name(graph),
            "{dispatch}"
        );
        let (start, end) = (
            dispatch["start_ns"].as_u64().unwrap(),
            dispatch["end_ns"].as_u64().unwrap(),
        );
        // At least the sleep, at most the whole call as the program timed it (the events lie inside).
        let call_ns: u64 = stdout
            .lines()
            .find_map(|line| {
                line.strip_prefix(&format!("call {}: ", index + 1))?
                    .strip_suffix(" ns")?
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no call {} in {stdout}", index + 1));
        let took_ns = end - start;
        assert!(
            took_ns >= length_us * 1_000 && took_ns <= call_ns + 1_000,
            "launch {index}: slept {length_us} µs, timed {took_ns} ns, the call took {call_ns} ns"
        );
        assert!(
            start >= previous_end,
            "launch {index} starts before the last ended"
        );
        previous_end = end;
    }
    assert_eq!(
        profile["conditions"]["mode"],
        kernelscope::profile::EVENT_TIMED_GRAPHS_MODE
    );
    assert!(
        out.contains("timing: submissions by cuda event pairs (around each cudaGraphLaunch"),
        "{out}"
    );
    // Each launch is a step, found from its call.
    assert_eq!(
        profile["tokens"].as_array().unwrap().len(),
        lengths_us.len(),
        "{out}"
    );
    std::fs::remove_dir_all(&folder).unwrap();
}
