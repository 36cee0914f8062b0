//! The injection library of `kscope profile` (crates/inject), loaded by the
//! CUDA driver into a program that knows nothing of it: `kscope run` on the
//! GPU with profiling off, under `CUDA_INJECTION64_PATH`. Its record file
//! must end cleanly and hold one kernel record for every dispatch the same
//! run counts in-process, graph replays included. A CUDA test: it skips
//! loudly without a GPU and fails with `KSCOPE_REQUIRE_GPU=1`.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use common::{injection_library, kscope_binary};
use kernelscope::DeviceOptions;
use kernelscope::testing::Backend;
use kernelscope_trace::{EndReason, Ending, Frame, injection_settings, read};

#[test]
fn an_injected_run_records_every_kernel_it_dispatches() {
    // Only to learn whether there is a GPU (and to skip loudly if not).
    if Backend::Cuda.device(DeviceOptions::new()).is_none() {
        return;
    }
    let library = injection_library();
    let folder = std::env::temp_dir().join(format!("kscope-inject-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&folder).unwrap();
    let run = [
        "run",
        "--device",
        "cuda",
        "--max-tokens",
        "8",
        "--prefill-chunk",
        "1",
    ];
    let output = Command::new(kscope_binary())
        .args(run)
        .env(injection_settings::CUDA_INJECTION_VARIABLE, &library)
        .env(injection_settings::TRACE_DIR_VARIABLE, &folder)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("not recording"), "{stderr}");
    let files: Vec<PathBuf> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "one process, one file: {files:?}");
    let trace = read(&std::fs::read(&files[0]).unwrap());
    std::fs::remove_dir_all(&folder).unwrap();
    let header = trace.header.clone().expect("a header");
    assert!(header.command.iter().any(|part| part == "run"), "{header:?}");
    let Ending::Ended(end) = trace.ending else {
        panic!(
            "the run exited normally, so its file ends with an end frame: {:?}",
            trace.ending
        )
    };
    assert_eq!(end.reason(), EndReason::Exit);
    assert_eq!(end.dropped, 0, "CUPTI dropped records");
    let kernels: Vec<_> = trace
        .frames
        .iter()
        .filter_map(|frame| match frame {
            Frame::Kernel(kernel) => Some(kernel),
            _ => None,
        })
        .collect();
    for kernel in &kernels {
        assert!(
            kernel.end_ns >= kernel.start_ns && kernel.start_ns > 0,
            "{kernel:?}"
        );
        assert!(!trace.text(kernel.name).is_empty(), "{kernel:?}");
    }
    assert!(
        kernels.iter().any(|kernel| kernel.graph != 0),
        "decode replays CUDA graphs: their kernels carry the graph's id"
    );
    // The same run profiled in-process counts its dispatches.
    let profile_path = std::env::temp_dir().join(format!("kscope-inject-{}.json", std::process::id()));
    let (code, _, stderr) =
        common::kscope(&[&run[..], &["--profile-json", profile_path.to_str().unwrap()]].concat());
    assert_eq!(code, 0, "{stderr}");
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&profile_path).unwrap()).unwrap();
    std::fs::remove_file(&profile_path).unwrap();
    // Kernel by kernel: every dispatch the run recorded in-process, as many
    // times as it ran. The only kernels beyond them are the synthetic
    // weights' fills, made while the model opens, before its profile starts.
    let mut recorded: BTreeMap<String, usize> = BTreeMap::new();
    for dispatch in profile["dispatches"].as_array().unwrap() {
        *recorded
            .entry(dispatch["kernel"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    let mut injected: BTreeMap<String, usize> = BTreeMap::new();
    for kernel in &kernels {
        *injected.entry(trace.text(kernel.name).to_string()).or_default() += 1;
    }
    let dispatches = profile["counters"]["dispatches"].as_u64().unwrap() as usize;
    assert_eq!(
        recorded.values().sum::<usize>(),
        dispatches,
        "the in-process profile timed every dispatch"
    );
    let before_profile: Vec<&String> = injected
        .keys()
        .filter(|name| !recorded.contains_key(*name))
        .collect();
    assert!(
        before_profile
            .iter()
            .all(|name| name.starts_with("synthetic_fill_")),
        "kernels not in the in-process profile: {before_profile:?}"
    );
    for (name, count) in &recorded {
        assert_eq!(
            injected.get(name),
            Some(count),
            "{name}: injected {injected:?}, in-process {recorded:?}"
        );
    }
}
