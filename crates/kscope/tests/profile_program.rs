//! `kscope profile -- CMD` on the GPU, against programs of known structure:
//! `programs/nvtx_steps.cu` (compiled here with nvcc) has five NVTX "step"
//! ranges of exactly known kernels, copies, sets, a graph launch and a
//! sync; its modes exit with 7, crash with SIGSEGV, are killed with SIGKILL,
//! or start a second process. Every kernel and range is counted exactly,
//! the exit status passes through, a dead child still leaves a profile of
//! what it did. And kscope's own decode profiled from outside agrees with
//! its in-process profile kernel by kernel. The tests take the GPU one at a
//! time (`gpu_alone`). CUDA tests: they skip loudly
//! without a GPU and fail with `KSCOPE_REQUIRE_GPU=1`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::kscope_binary;
use kernelscope::DeviceOptions;
use kernelscope::testing::Backend;
use serde_json::Value;

/// The test program, compiled once per test into `folder`; `None` (after
/// a loud skip) without a GPU.
fn nvtx_steps(folder: &Path) -> Option<PathBuf> {
    nvtx_steps_built(folder, &[])
}

/// [`nvtx_steps`] built with `flags` added to nvcc's.
fn nvtx_steps_built(folder: &Path, flags: &[&str]) -> Option<PathBuf> {
    Backend::Cuda.device(DeviceOptions::new())?;
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/nvtx_steps.cu");
    let nvcc = ["nvcc", "/usr/local/cuda/bin/nvcc"]
        .into_iter()
        .find(|nvcc| Command::new(nvcc).arg("--version").output().is_ok())
        .expect("a GPU machine has nvcc (on PATH or in /usr/local/cuda/bin)");
    let binary = folder.join("nvtx_steps");
    let output = Command::new(nvcc)
        .args(flags)
        .args(["-O2", "-arch=native", "-o"])
        .arg(&binary)
        .arg(&source)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "nvcc: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(binary)
}

/// Held by each test for its whole run: one test at a time on the GPU. PM sampling counts
/// the whole device's DRAM traffic and holds its profiling machinery: run beside the
/// self-profile test, another test's program was recorded with no kernel at all (two H200s),
/// and the self-profile's bytes and times took the other programs' work as kscope's
/// (`rope_append_bf16` +10.8 %, `matvec_add_bf16` +10.0 %).
fn gpu_alone() -> std::sync::MutexGuard<'static, ()> {
    static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
    GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn scratch(name: &str) -> PathBuf {
    let folder = std::env::temp_dir().join(format!("kscope-profile-program-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&folder).unwrap();
    folder
}

/// Runs `kscope profile FLAGS --profile-json J -- COMMAND`: its exit code,
/// its output, and the profile when one was written.
fn profile_of(
    folder: &Path,
    flags: &[&str],
    command: &[&str],
    environment: &[(&str, &str)],
) -> (i32, String, Option<Value>) {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run_number = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let json = folder.join(format!("profile-{run_number}.json"));
    let mut run = Command::new(kscope_binary());
    run.arg("profile")
        .args(flags)
        .arg("--profile-json")
        .arg(&json)
        .arg("--")
        .args(command);
    for (name, value) in environment {
        run.env(name, value);
    }
    let output = finish_within(run, std::time::Duration::from_secs(300));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let profile = std::fs::read_to_string(&json)
        .ok()
        .map(|text| serde_json::from_str(&text).unwrap());
    (output.status.code().unwrap_or(-1), text, profile)
}

/// Runs `command` to its end, killing it and failing the test past `limit`
/// (a profiler that hangs its program must fail, not stall the suite).
fn finish_within(mut command: Command, limit: std::time::Duration) -> std::process::Output {
    use std::io::Read;
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Drained as they fill, so a talkative program never blocks on a full pipe.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            child.kill().unwrap();
            let _ = child.wait();
            let stderr = stderr.join().unwrap();
            panic!(
                "{command:?} still ran after {limit:?}: {}",
                String::from_utf8_lossy(&stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// `(kernel, scope)` → count, over the dispatches of token `token`.
fn token_contents(profile: &Value, token: u64) -> BTreeMap<(String, String), usize> {
    let mut contents = BTreeMap::new();
    for dispatch in profile["dispatches"].as_array().unwrap() {
        if dispatch["token"].as_u64() == Some(token) {
            let key = (
                dispatch["kernel"].as_str().unwrap().to_string(),
                dispatch["scope"].as_str().unwrap().to_string(),
            );
            *contents.entry(key).or_default() += 1;
        }
    }
    contents
}

/// What every step of nvtx_steps holds, by kernel and NVTX scope.
fn one_step() -> BTreeMap<(String, String), usize> {
    [
        ("copy_values", "layer.0", 1),
        ("memset", "layer.0", 1),
        ("copy_values", "layer.1", 1),
        ("memcpy HtoD", "layer.1", 1),
        ("graph_add", "decode", 1),
        ("graph_scale", "decode", 1),
        ("graph_square", "decode", 1),
    ]
    .into_iter()
    .map(|(kernel, scope, count)| ((kernel.to_string(), scope.to_string()), count))
    .collect()
}

/// Tokens 0..`count` each hold exactly [`one_step`]; `what` names the run in a failure.
fn each_token_holds_one_step(profile: &Value, count: u64, what: &str) {
    for token in 0..count {
        assert_eq!(token_contents(profile, token), one_step(), "{what} token {token}");
    }
}

fn tokens(profile: &Value) -> usize {
    profile["tokens"].as_array().unwrap().len()
}

#[test]
fn a_program_of_known_structure_is_counted_exactly() {
    let _gpu = gpu_alone();
    let folder = scratch("known");
    let Some(program) = nvtx_steps(&folder) else {
        return;
    };
    let program = program.to_str().unwrap();
    let (code, output, profile) = profile_of(&folder, &["--step", "step"], &[program, "plain"], &[]);
    assert_eq!(code, 0, "{output}");
    let profile = profile.expect("a profile");
    assert_eq!(tokens(&profile), 5, "{output}");
    each_token_holds_one_step(&profile, 5, "");
    let outside: Vec<&str> = profile["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|dispatch| dispatch["token"].is_null())
        .map(|dispatch| dispatch["kernel"].as_str().unwrap())
        .collect();
    assert_eq!(outside, ["init_values"], "{output}");
    let graph_kernels = profile["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|dispatch| dispatch["label"] == "graph launch")
        .count();
    assert_eq!(graph_kernels, 15);
    let program_conditions = &profile["conditions"]["program"];
    assert_eq!(program_conditions["steps"], "NVTX ranges named \"step\"");
    assert_eq!(program_conditions["processes"], 1);
    assert!(
        profile["conditions"]["device"]
            .as_str()
            .unwrap()
            .contains("NVIDIA"),
        "{}",
        profile["conditions"]
    );
    // PM sampling is on by default, and its account of where the DRAM
    // bytes went is the one warning such a run carries; nothing else.
    let warnings = profile["warnings"].as_array().unwrap();
    let other: Vec<&Value> = warnings
        .iter()
        .filter(|warning| {
            !warning.as_str().is_some_and(|text| {
                text.starts_with("process ") && text.contains("DRAM bytes measured by PM sampling")
            })
        })
        .collect();
    assert!(other.is_empty() && warnings.len() <= 1, "{}", profile["warnings"]);
    assert!(
        output.contains("steps (the tokens below): NVTX ranges named \"step\""),
        "{output}"
    );

    // Without --step, each graph launch is a step.
    let (code, output, profile) = profile_of(&folder, &[], &[program, "plain"], &[]);
    assert_eq!(code, 0, "{output}");
    let profile = profile.expect("a profile");
    assert_eq!(profile["conditions"]["program"]["steps"], "CUDA graph launches");
    assert_eq!(tokens(&profile), 5);
    for token in 0..5 {
        assert_eq!(
            token_contents(&profile, token).values().sum::<usize>(),
            3,
            "token {token}"
        );
    }
    std::fs::remove_dir_all(&folder).unwrap();
}

/// `--steps A..B` records those steps alone (CUPTI attached for them only),
/// with their kernels and scopes exactly as a whole run gives them; either
/// way of recording API calls gives the same profile.
#[test]
fn a_window_of_steps_and_either_way_of_recording_calls_count_exactly() {
    let _gpu = gpu_alone();
    let folder = scratch("window");
    let Some(program) = nvtx_steps(&folder) else {
        return;
    };
    let program = program.to_str().unwrap();
    for how in ["activity", "callbacks"] {
        let flags = ["--step", "step", "--steps", "1..3", "--api-calls", how];
        let (code, output, profile) = profile_of(&folder, &flags, &[program, "plain"], &[]);
        assert_eq!(code, 0, "{output}");
        let profile = profile.expect("a profile");
        assert_eq!(tokens(&profile), 2, "{how}: {output}");
        each_token_holds_one_step(&profile, 2, how);
        // The init kernel ran before the window: not recorded.
        assert_eq!(
            profile["dispatches"].as_array().unwrap().len(),
            2 * one_step().len(),
            "{how}: {output}"
        );
        let steps = profile["conditions"]["program"]["steps"].as_str().unwrap();
        assert!(steps.contains("only steps 1..3"), "{steps}");
        // CUPTI attached after the context was made still names its device.
        let device = profile["conditions"]["device"].as_str().unwrap();
        assert!(device.contains("NVIDIA"), "{how}: {device}");

        let (code, output, profile) = profile_of(
            &folder,
            &["--step", "step", "--api-calls", how],
            &[program, "plain"],
            &[],
        );
        assert_eq!(code, 0, "{output}");
        let profile = profile.expect("a profile");
        assert_eq!(tokens(&profile), 5, "{how}: {output}");
        each_token_holds_one_step(&profile, 5, how);
    }
    std::fs::remove_dir_all(&folder).unwrap();
}

/// `--graphs whole`: each step's graph launch is one WholeGraph dispatch
/// in the scope it was launched from, and everything outside the graph is
/// recorded exactly as a node-by-node run records it.
#[test]
fn a_graph_traced_whole_is_one_dispatch_a_launch() {
    let _gpu = gpu_alone();
    let folder = scratch("whole-graphs");
    let Some(program) = nvtx_steps(&folder) else {
        return;
    };
    let program = program.to_str().unwrap();
    let (code, output, profile) = profile_of(
        &folder,
        &["--step", "step", "--graphs", "whole"],
        &[program, "plain"],
        &[],
    );
    assert_eq!(code, 0, "{output}");
    let profile = profile.expect("a profile");
    assert_eq!(tokens(&profile), 5, "{output}");
    assert_eq!(
        profile["conditions"]["mode"],
        kernelscope::profile::WHOLE_GRAPHS_MODE
    );
    let mut expected = one_step();
    expected.retain(|(_, scope), _| scope != "decode");
    for token in 0..5 {
        let mut contents = token_contents(&profile, token);
        let graphs: Vec<(String, String)> = contents
            .keys()
            .filter(|(kernel, _)| kernel.starts_with(kernelscope_trace::WHOLE_GRAPH_NAME_PREFIX))
            .cloned()
            .collect();
        assert_eq!(graphs.len(), 1, "token {token}: {contents:?}");
        assert_eq!(graphs[0].1, "decode", "token {token}");
        assert_eq!(contents.remove(&graphs[0]), Some(1), "token {token}");
        assert_eq!(contents, expected, "token {token}");
    }
    for dispatch in profile["dispatches"].as_array().unwrap() {
        if dispatch["label"] == "graph launch" {
            assert_eq!(dispatch["op_kind"], "WholeGraph", "{dispatch}");
            assert!(
                dispatch["end_ns"].as_u64() > dispatch["start_ns"].as_u64(),
                "{dispatch}"
            );
        }
    }
    std::fs::remove_dir_all(&folder).unwrap();
}

/// `--graphs events`: CUPTI never attached, each graph launch through the shared CUDA
/// runtime timed by two events, in the scope it was launched from, and nothing else
/// recorded; a program on nvcc's default static runtime shows no launch, and is told why.
#[test]
fn graph_launches_timed_by_events_are_one_dispatch_a_launch() {
    let _gpu = gpu_alone();
    let folder = scratch("event-graphs");
    let Some(program) = nvtx_steps_built(&folder, &["-cudart", "shared"]) else {
        return;
    };
    let events = ["--step", "step", "--graphs", "events"];
    let (code, output, profile) = profile_of(&folder, &events, &[program.to_str().unwrap(), "plain"], &[]);
    assert_eq!(code, 0, "{output}");
    let profile = profile.expect("a profile");
    assert_eq!(tokens(&profile), 5, "{output}");
    assert_eq!(
        profile["conditions"]["mode"],
        kernelscope::profile::EVENT_TIMED_GRAPHS_MODE
    );
    for token in 0..5 {
        let contents = token_contents(&profile, token);
        assert_eq!(contents.len(), 1, "token {token}: {contents:?}");
        let ((kernel, scope), count) = contents.into_iter().next().unwrap();
        assert!(
            kernel.starts_with(kernelscope_trace::WHOLE_GRAPH_NAME_PREFIX),
            "{kernel}"
        );
        assert_eq!((scope.as_str(), count), ("decode", 1), "token {token}");
    }
    for dispatch in profile["dispatches"].as_array().unwrap() {
        let took = dispatch["end_ns"].as_u64().unwrap() - dispatch["start_ns"].as_u64().unwrap();
        // Three small kernels: more than nothing, far less than 10 ms.
        assert!(took > 0 && took < 10_000_000, "{dispatch}");
    }
    let static_runtime = nvtx_steps(&folder).unwrap();
    let (code, output, _) = profile_of(
        &folder,
        &events,
        &[static_runtime.to_str().unwrap(), "plain"],
        &[],
    );
    assert_ne!(code, 0, "{output}");
    assert!(output.contains("--graphs events saw no graph launch"), "{output}");
    std::fs::remove_dir_all(&folder).unwrap();
}

#[test]
fn the_exit_status_passes_through_and_a_dead_child_leaves_its_profile() {
    let _gpu = gpu_alone();
    let folder = scratch("endings");
    let Some(program) = nvtx_steps(&folder) else {
        return;
    };
    let program = program.to_str().unwrap();

    let (code, output, profile) = profile_of(&folder, &["--step", "step"], &[program, "exit7"], &[]);
    assert_eq!(code, 7, "{output}");
    assert_eq!(tokens(&profile.expect("a profile")), 5);

    let (code, output, profile) = profile_of(&folder, &["--step", "step"], &[program, "segv-after-3"], &[]);
    assert_eq!(code, 128 + 11, "{output}");
    let profile = profile.expect("a crashed program's profile");
    assert_eq!(tokens(&profile), 3, "{output}");
    each_token_holds_one_step(&profile, 3, "");
    assert!(output.contains("ended by signal 11"), "{output}");

    let (code, output, profile) = profile_of(&folder, &["--step", "step"], &[program, "kill-after-3"], &[]);
    assert_eq!(code, 128 + 9, "{output}");
    let profile = profile.expect("a killed program's profile");
    assert_eq!(tokens(&profile), 3, "{output}");
    assert!(output.contains("ended without finishing its records"), "{output}");
    std::fs::remove_dir_all(&folder).unwrap();
}

#[test]
fn a_second_process_becomes_a_second_rank() {
    let _gpu = gpu_alone();
    let folder = scratch("spawn");
    let Some(program) = nvtx_steps(&folder) else {
        return;
    };
    let program = program.to_str().unwrap();
    let (code, output, profile) = profile_of(
        &folder,
        &["--step", "step"],
        &[program, "spawn"],
        &[("RANK", "0")],
    );
    assert_eq!(code, 0, "{output}");
    let profile = profile.expect("a profile");
    assert_eq!(profile["conditions"]["program"]["processes"], 2, "{output}");
    assert_eq!(profile["conditions"]["topology"]["ranks"], 2);
    assert_eq!(tokens(&profile), 5);
    let second = &profile["ranks"][0];
    assert_eq!(second["rank"], 1);
    assert_eq!(second["tokens"].as_array().unwrap().len(), 5);
    std::fs::remove_dir_all(&folder).unwrap();
}

/// Per kernel (by its readable name, as `kscope profile` shows it), the
/// sum of `value` over a profile's dispatches.
fn per_kernel(profile: &Value, value: impl Fn(&Value) -> u64) -> BTreeMap<String, u64> {
    let mut totals = BTreeMap::new();
    for dispatch in profile["dispatches"].as_array().unwrap() {
        let name = kernelscope::profile::readable_kernel_name(dispatch["kernel"].as_str().unwrap());
        *totals.entry(name).or_default() += value(dispatch);
    }
    totals
}

/// Per-kernel total bytes of a profile's dispatches.
fn kernel_bytes(profile: &Value) -> BTreeMap<String, u64> {
    per_kernel(profile, |dispatch| dispatch["bytes"].as_u64().unwrap())
}

/// Per-kernel total ns of a profile's dispatches.
fn kernel_totals(profile: &Value) -> BTreeMap<String, u64> {
    per_kernel(profile, |dispatch| {
        dispatch["end_ns"].as_u64().unwrap() - dispatch["start_ns"].as_u64().unwrap()
    })
}

#[test]
fn kscope_profiled_from_outside_agrees_with_its_own_profile() {
    let _gpu = gpu_alone();
    let folder = scratch("self");
    if Backend::Cuda.device(DeviceOptions::new()).is_none() {
        return;
    }
    let run = [
        "run",
        "--device",
        "cuda",
        "--preset",
        "llama-3.2-1b",
        "--max-tokens",
        "64",
    ];
    // In-process profiles before and after the injected run: the GPU's clock may differ
    // between two runs a few seconds apart (on an H200 the 1.5 µs rope kernels of one
    // in-process run took 11 % less than in the injected run after it, and than in three
    // in-process runs by hand), so each kernel is held to the nearer of the two.
    let own_profile = |name: &str| -> Value {
        let path = folder.join(name);
        let (code, _, stderr) =
            common::kscope(&[&run[..], &["--profile", "--profile-json", path.to_str().unwrap()]].concat());
        assert_eq!(code, 0, "{stderr}");
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    };
    let own = own_profile("own_before.json");
    let kscope = kscope_binary();
    let command: Vec<&str> = [&[kscope.to_str().unwrap()][..], &run[..]].concat();
    // On an H200, samples every 10 µs were lost (12 % of the time uncovered); every 20 µs none were.
    // The records stay in the scratch folder when the test fails, to be read again
    // (`kscope profile --from-records`): a shortfall once seen in one suite run alone could
    // not be examined without them.
    let records = folder.join("records");
    let (code, output, injected) = profile_of(
        &folder,
        &[
            "--dram-bytes-interval",
            "20",
            "--keep-records",
            records.to_str().unwrap(),
        ],
        &command,
        &[],
    );
    assert_eq!(code, 0, "{output}");
    let injected = injected.expect("a profile");
    // DRAM bytes measured by PM sampling against the bytes kscope's kernels declare.
    assert!(
        injected["conditions"]["bytes_measured"].is_string(),
        "no measured bytes: {output}"
    );
    let lost = injected["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|warning| warning.as_str().unwrap().contains("no sample covers"));
    assert!(lost.is_none(), "PM samples were lost: {lost:?}");
    // The sampler starts on a thread of its own ~700 ms after the context exists: the program's
    // work waits for it, or its first kernels (the weights' fills, on a loaded two-GPU host the
    // prefill and the first 14 ms of the decode too) run unsampled.
    let uncovered = injected["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|warning| warning.as_str().unwrap().contains("no sample covered them whole"));
    assert!(uncovered.is_none(), "units ran unsampled: {uncovered:?}");
    let (declared, measured) = (kernel_bytes(&own), kernel_bytes(&injected));
    for (kernel, &bytes) in &declared {
        if let Some(&other) = measured.get(kernel)
            && bytes > 0
        {
            eprintln!(
                "{kernel}: declared {:.1} MB, measured {:.1} MB ({:+.1}%)",
                bytes as f64 / 1e6,
                other as f64 / 1e6,
                100.0 * (other as f64 / bytes as f64 - 1.0)
            );
        }
    }
    for kernel in ["norm_matvec_bf16", "norm_matvec_silu_bf16", "matvec_add_bf16"] {
        let (bytes, other) = (declared[kernel] as f64, measured[kernel] as f64);
        assert!(
            (other / bytes - 1.0).abs() <= 0.10,
            "{kernel}: measured {other} bytes against {bytes} declared (records kept in {}); the \
             profile's warnings: {}; kscope profile said: {output}",
            records.display(),
            injected["warnings"]
        );
    }
    let own_after = kernel_totals(&own_profile("own_after.json"));
    let (own, injected) = (kernel_totals(&own), kernel_totals(&injected));
    let own_total: u64 = own.values().sum();
    let mut shared = (0u64, 0u64);
    let mut worst = (String::new(), 0.0f64);
    let mut missing = 0u64;
    for (kernel, &before) in &own {
        // Libraries may pick other algorithms from run to run (cuBLASLt's split-K).
        let Some(&other) = injected.get(kernel) else {
            eprintln!(
                "{kernel}: in-process {:.3} ms, not in the injected run",
                before as f64 / 1e6
            );
            missing += before;
            continue;
        };
        let after = own_after.get(kernel).copied().unwrap_or(before);
        let time = if other.abs_diff(after) < other.abs_diff(before) {
            after
        } else {
            before
        };
        shared.0 += time;
        shared.1 += other;
        let deviation = (other as f64 - time as f64).abs() / time as f64;
        eprintln!(
            "{kernel}: in-process {:.3} ms (before {:.3}, after {:.3}), injected {:.3} ms ({:+.2}%)",
            time as f64 / 1e6,
            before as f64 / 1e6,
            after as f64 / 1e6,
            other as f64 / 1e6,
            100.0 * (other as f64 / time as f64 - 1.0)
        );
        // Kernels holding 2 % of the time or more are held to 5 % each.
        if time * 50 >= own_total && deviation > worst.1 {
            worst = (kernel.clone(), deviation);
        }
    }
    assert!(
        missing * 20 <= own_total,
        "kernels of {:.1}% of the in-process time are missing from the injected run",
        100.0 * missing as f64 / own_total as f64
    );
    let overall = (shared.1 as f64 - shared.0 as f64).abs() / shared.0 as f64;
    eprintln!(
        "all kernels: in-process {:.3} ms, injected {:.3} ms; largest deviation of a kernel of 2 % or more of the time: {} {:.2}%",
        shared.0 as f64 / 1e6,
        shared.1 as f64 / 1e6,
        worst.0,
        worst.1 * 100.0
    );
    assert!(
        overall <= 0.02,
        "per-kernel totals differ by {:.2}% in all",
        overall * 100.0
    );
    assert!(worst.1 <= 0.05, "{} differs by {:.2}%", worst.0, worst.1 * 100.0);
    std::fs::remove_dir_all(&folder).unwrap();
}
