//! End-to-end tests of per-dispatch profiling, run on every backend: two
//! dispatches in one labeled submission, grouping by label, op kind
//! propagation, the cross-check against the submission total, a capability
//! diagnostic, the degrade path without dispatch timing, and graph replays.
//! The profiling level is an option of the device, so these tests set no
//! environment variables and can run in parallel.

mod common;

use kernelscope::profile::{DispatchTiming, ProfileLevel, TimingMechanism};
use kernelscope::runtime::LaunchGrid;
use kernelscope::testing::{Backend, random_f32};
use kernelscope::{DType, Device, DeviceOptions, Dispatch, Kernel, OpKind};

fn dispatch_profiled_device(backend: Backend) -> Option<Device> {
    backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch))
}

fn inc_one_dispatch(kernel: &Kernel, input: &kernelscope::Buffer, output: &kernelscope::Buffer) -> Dispatch {
    let n = input.len();
    Dispatch::new(kernel)
        .read(input)
        .write(output)
        .param(n as u32)
        .grid(LaunchGrid::linear(n, 32))
        .cost(4 * n as u64, 4 * n as u64, n as u64)
}

fn two_dispatches_in_one_labeled_submission(backend: Backend) {
    let Some(device) = dispatch_profiled_device(backend) else {
        return;
    };
    let kernel = common::inc_one_registry().kernel(&device, "inc_one").unwrap();
    let n = 256;
    let data = random_f32(1, n);
    let input = device.buffer_from_slice(&data, &[n]).unwrap();
    let output = device.alloc(DType::F32, &[n]).unwrap();

    let mut encoder = device.command_encoder();
    encoder
        .dispatch(inc_one_dispatch(&kernel, &input, &output))
        .unwrap();
    encoder.memory_barrier();
    encoder
        .dispatch(inc_one_dispatch(&kernel, &input, &output))
        .unwrap();
    encoder.commit_and_wait_labeled("test.profile.cb").unwrap();

    let expected: Vec<f32> = data.iter().map(|x| x + 1.0).collect();
    assert_eq!(output.to_vec::<f32>().unwrap(), expected);

    let groups = device.profiler().dispatches_by_label();
    let (label, entries) = groups
        .iter()
        .find(|(label, _)| label == "test.profile.cb")
        .expect("label present");
    assert_eq!(label, "test.profile.cb");
    assert_eq!(entries.len(), 2, "exactly 2 dispatches encoded; got {entries:?}");
    for (i, entry) in entries.iter().enumerate() {
        assert_eq!(
            entry.index as usize, i,
            "index must follow insertion order: {entry:?}"
        );
        assert!(entry.end_ns >= entry.start_ns, "end must follow start: {entry:?}");
        assert_eq!(
            entry.op_kind,
            OpKind::Other,
            "default op kind is Other: {entry:?}"
        );
        assert_eq!(&*entry.kernel, "inc_one");
    }
    assert!(
        entries[1].start_ns >= entries[0].end_ns,
        "dispatches after a barrier run in order"
    );

    // Cross-check: the submission contains its dispatches, so its total is at
    // least their sum, within a stated slop of 1 ms for clock granularity.
    let table = device.profiler().submission_table();
    let row = table
        .iter()
        .find(|row| row.label == "test.profile.cb")
        .expect("submission row");
    assert_eq!(row.count, 1);
    let dispatch_sum: u64 = entries.iter().map(|e| e.duration_ns()).sum();
    assert!(
        row.total_ns + 1_000_000 >= dispatch_sum,
        "submission total {} ns must be >= dispatch sum {dispatch_sum} ns within 1 ms",
        row.total_ns
    );
    device.profiler().reset();
    assert!(device.profiler().dispatches_by_label().is_empty());
    assert!(device.profiler().submission_table().is_empty());
}

fn dispatches_are_grouped_by_label(backend: Backend) {
    let Some(device) = dispatch_profiled_device(backend) else {
        return;
    };
    let kernel = common::inc_one_registry().kernel(&device, "inc_one").unwrap();
    let n = 64;
    let input = device.buffer_from_slice(&random_f32(2, n), &[n]).unwrap();
    let output = device.alloc(DType::F32, &[n]).unwrap();
    for label in ["test.cb.alpha", "test.cb.beta", "test.cb.alpha"] {
        let mut encoder = device.command_encoder();
        encoder
            .dispatch(inc_one_dispatch(&kernel, &input, &output))
            .unwrap();
        encoder.commit_and_wait_labeled(label).unwrap();
    }
    let groups = device.profiler().dispatches_by_label();
    let labels: Vec<&str> = groups.iter().map(|(label, _)| label.as_str()).collect();
    assert_eq!(
        labels,
        ["test.cb.alpha", "test.cb.beta"],
        "labels in first-arrival order"
    );
    assert_eq!(groups[0].1.len(), 2, "alpha was committed twice");
    assert_eq!(groups[1].1.len(), 1, "beta once");
    assert!(
        groups
            .iter()
            .all(|(_, entries)| entries.iter().all(|e| e.index == 0))
    );
    assert!(
        groups[0].1[0].submission < groups[0].1[1].submission,
        "insertion order within a label"
    );
    let table = device.profiler().submission_table();
    assert_eq!(table.len(), 2);
    assert_eq!(
        table
            .iter()
            .find(|row| row.label == "test.cb.alpha")
            .unwrap()
            .count,
        2
    );
}

fn op_kind_propagates_into_dispatch_entry(backend: Backend) {
    let Some(device) = dispatch_profiled_device(backend) else {
        return;
    };
    let kernel = common::inc_one_registry().kernel(&device, "inc_one").unwrap();
    let n = 64;
    let input = device.buffer_from_slice(&random_f32(3, n), &[n]).unwrap();
    let output = device.alloc(DType::F32, &[n]).unwrap();
    let other = device.alloc(DType::F32, &[n]).unwrap();
    let mut encoder = device.command_encoder();
    encoder.set_scope("layer.0.attn");
    encoder.set_op_kind(OpKind::Attention);
    encoder
        .dispatch(inc_one_dispatch(&kernel, &input, &output))
        .unwrap();
    // The pending kind is consumed by one dispatch; the next is Other again.
    encoder
        .dispatch(inc_one_dispatch(&kernel, &input, &other))
        .unwrap();
    // An explicit kind on the dispatch wins.
    encoder
        .dispatch(inc_one_dispatch(&kernel, &output, &other).op_kind(OpKind::Softmax))
        .unwrap();
    encoder.commit_and_wait_labeled("test.opkind.cb").unwrap();
    let groups = device.profiler().dispatches_by_label();
    let entries = &groups[0].1;
    let kinds: Vec<OpKind> = entries.iter().map(|e| e.op_kind).collect();
    assert_eq!(kinds, [OpKind::Attention, OpKind::Other, OpKind::Softmax]);
    assert_eq!(entries[0].op_kind.name(), "Attention");
    assert!(entries.iter().all(|e| &*e.scope == "layer.0.attn"));
    assert!(
        entries
            .iter()
            .all(|e| e.bytes == 8 * n as u64 && e.flops == n as u64)
    );
}

fn capability_diagnostic(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let capabilities = device.capabilities();
    eprintln!(
        "[kernelscope diag] device={} backend={} submission timing={} dispatch timing={}",
        device.name(),
        device.backend(),
        capabilities.submission_timing,
        capabilities.dispatch_timing.describe()
    );
    let expected = match backend {
        Backend::Cpu => TimingMechanism::HostClock,
        Backend::Cuda => TimingMechanism::CudaEvents,
    };
    assert_eq!(capabilities.submission_timing.mechanism, expected);
    assert!(
        capabilities.dispatch_timing.is_supported(),
        "every backend of ours times dispatches by default: {:?}",
        capabilities.dispatch_timing
    );
}

/// The degrade path: where dispatches cannot be timed, the dispatch
/// table stays empty (never zeros), one warning is raised, and the
/// per-submission table still fills.
fn unsupported_dispatch_timing_degrades_to_submissions(backend: Backend) {
    let options = DeviceOptions::new()
        .profile(ProfileLevel::Dispatch)
        .without_dispatch_timing("simulated: no dispatch-boundary timestamps");
    let Some(device) = backend.device(options) else {
        return;
    };
    assert!(matches!(
        device.capabilities().dispatch_timing,
        DispatchTiming::Unsupported { .. }
    ));
    let kernel = common::inc_one_registry().kernel(&device, "inc_one").unwrap();
    let n = 64;
    let input = device.buffer_from_slice(&random_f32(4, n), &[n]).unwrap();
    let output = device.alloc(DType::F32, &[n]).unwrap();
    let mut encoder = device.command_encoder();
    for _ in 0..3 {
        encoder
            .dispatch(inc_one_dispatch(&kernel, &input, &output))
            .unwrap();
        encoder.commit_and_wait_labeled("degraded").unwrap();
    }
    assert!(
        device.profiler().dispatches_by_label().is_empty(),
        "no dispatch entries, not zeros"
    );
    assert_eq!(device.profiler().submission_table()[0].count, 3);
    let warnings = device.profiler().warnings();
    assert_eq!(warnings.len(), 1, "warned once: {warnings:?}");
    assert!(warnings[0].contains("unsupported"));
    // The profile says why (the report prints it), and keeps the submissions.
    let profile = device.profile(device.conditions("eager", None));
    assert!(profile.dispatches.is_empty());
    assert!(
        profile
            .conditions
            .dispatch_timing
            .describe()
            .starts_with("unsupported"),
        "{:?}",
        profile.conditions.dispatch_timing
    );
    assert_eq!(profile.submissions.len(), 3, "submission rows still kept");
}

fn graph_replay_is_profiled_per_dispatch(backend: Backend) {
    let Some(device) = dispatch_profiled_device(backend) else {
        return;
    };
    let kernel = common::inc_one_registry().kernel(&device, "inc_one").unwrap();
    let n = 128;
    let input = device.buffer_from_slice(&random_f32(5, n), &[n]).unwrap();
    let middle = device.alloc(DType::F32, &[n]).unwrap();
    let output = device.alloc(DType::F32, &[n]).unwrap();
    let mut encoder = device.command_encoder();
    encoder.begin_capture().unwrap();
    encoder.set_op_kind(OpKind::ElemAdd);
    encoder
        .dispatch(inc_one_dispatch(&kernel, &input, &middle))
        .unwrap();
    encoder
        .dispatch(inc_one_dispatch(&kernel, &middle, &output))
        .unwrap();
    let graph = encoder.end_capture().unwrap();
    assert!(
        device.profiler().dispatches_by_label().is_empty(),
        "capture runs nothing"
    );
    for _ in 0..2 {
        encoder.replay(&graph).unwrap();
        encoder.commit_and_wait_labeled("test.graph").unwrap();
    }
    let groups = device.profiler().dispatches_by_label();
    let entries = &groups[0].1;
    assert_eq!(entries.len(), 4, "two replays of two dispatches");
    let indices: Vec<u32> = entries.iter().map(|e| e.index).collect();
    assert_eq!(indices, [0, 1, 0, 1]);
    assert_eq!(entries[0].op_kind, OpKind::ElemAdd);
    assert_eq!(entries[1].op_kind, OpKind::Other);
    let checks = kernelscope::profile::cross_check(&device.profile(device.conditions("graph", None)));
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0].submissions, 2);
    assert!(checks[0].submission_ns + 1_000_000 >= checks[0].dispatch_sum_ns);
    assert!(!checks[0].flagged, "the clocks agree: {:?}", checks[0]);
}

/// Captures `per_graph` `inc_one` dispatches bouncing `n` random values
/// between two buffers, replays the graph `replays` times (each its own
/// submission labeled `label`) and checks every replay ran.
fn replay_ping_pong(device: &Device, n: usize, per_graph: usize, replays: usize, seed: u64, label: &str) {
    let kernel = common::inc_one_registry().kernel(device, "inc_one").unwrap();
    let start_values = random_f32(seed, n);
    let ping = device.buffer_from_slice(&start_values, &[n]).unwrap();
    let pong = device.alloc(DType::F32, &[n]).unwrap();
    let mut encoder = device.command_encoder();
    encoder.begin_capture().unwrap();
    for step in 0..per_graph {
        let (from, to) = if step % 2 == 0 {
            (&ping, &pong)
        } else {
            (&pong, &ping)
        };
        encoder.dispatch(inc_one_dispatch(&kernel, from, to)).unwrap();
    }
    let graph = encoder.end_capture().unwrap();
    for _ in 0..replays {
        encoder.replay(&graph).unwrap();
        encoder.commit_and_wait_labeled(label).unwrap();
    }
    // One f32 add per dispatch, as the kernel does: the same roundings.
    let mut expected = start_values;
    for _ in 0..per_graph * replays {
        expected.iter_mut().for_each(|value| *value += 1.0);
    }
    assert_eq!(ping.to_vec::<f32>().unwrap(), expected, "every replay ran");
}

/// Many replays of a longer graph: every dispatch time arrives (CUDA hands
/// CUPTI's records over a buffer at a time, after the waits that made them),
/// in order, inside its own submission; on CUDA a replay's submission is
/// held until enqueued, so its first kernel starts right after its start.
fn many_replays_are_all_timed_inside_their_submissions(backend: Backend) {
    let Some(device) = dispatch_profiled_device(backend) else {
        return;
    };
    let (per_graph, replays) = (48, 40);
    replay_ping_pong(&device, 257, per_graph, replays, 11, "test.many");

    let profile = device.profile(device.conditions("many replays", None));
    assert!(profile.warnings.is_empty(), "{:?}", profile.warnings);
    assert_eq!(profile.submissions.len(), replays);
    assert_eq!(
        profile.dispatches.len(),
        per_graph * replays,
        "no dispatch time lost"
    );
    // Clocks differ across backends' sources (events vs CUPTI): allow a little.
    let slack = if backend == Backend::Cuda { 20_000 } else { 0 };
    for (position, dispatch) in profile.dispatches.iter().enumerate() {
        assert_eq!(&*dispatch.kernel, "inc_one");
        assert_eq!(dispatch.index as usize, position % per_graph, "stream order kept");
        let submission = &profile.submissions[position / per_graph];
        assert_eq!(dispatch.submission, submission.submission);
        assert!(
            dispatch.start_ns + slack >= submission.start_ns && dispatch.end_ns <= submission.end_ns + slack,
            "dispatch {position} [{}, {}] outside its submission [{}, {}]",
            dispatch.start_ns,
            dispatch.end_ns,
            submission.start_ns,
            submission.end_ns
        );
    }
    for (position, submission) in profile.submissions.iter().enumerate() {
        if backend == Backend::Cuda {
            assert!(
                submission.device_held(),
                "a replay under CUPTI is held until enqueued"
            );
            assert!(submission.host_enqueue_ns() > 0);
            let first = &profile.dispatches[position * per_graph];
            let lead = first.start_ns.saturating_sub(submission.start_ns);
            assert!(
                lead < 200_000,
                "submission {position}: first kernel {lead} ns after the start though the host had finished enqueueing"
            );
        } else {
            assert_eq!(submission.enqueue, None, "the CPU runs work as it is committed");
        }
    }
}

/// A graph too long for a held stream's command queue: on CUDA under CUPTI
/// the launch of a graph of thousands of kernels waits for queue room that
/// a stream held at the gate never frees (an 80-layer model's prefill chunk
/// hung this way). The gate's watchdog lets such a launch go: every replay
/// runs and is timed, and once a replay was let go, the profile says that
/// graph is no longer held and warns why.
fn a_graph_too_long_to_hold_still_replays(backend: Backend) {
    let Some(device) = dispatch_profiled_device(backend) else {
        return;
    };
    let (per_graph, replays) = (16_384, 3);
    replay_ping_pong(&device, 129, per_graph, replays, 23, "test.long");

    let profile = device.profile(device.conditions("long graph", None));
    assert_eq!(profile.submissions.len(), replays);
    if device.capabilities().dispatch_timing_in_graphs {
        assert_eq!(
            profile.dispatches.len(),
            per_graph * replays,
            "no dispatch time lost"
        );
    }
    let held: Vec<bool> = profile
        .submissions
        .iter()
        .map(|submission| submission.device_held())
        .collect();
    let outran = profile
        .warnings
        .iter()
        .any(|warning| warning.contains("command queue"));
    if backend != Backend::Cuda || !device.capabilities().dispatch_timing_in_graphs {
        assert!(
            held.iter().all(|held| !held),
            "only CUDA under CUPTI holds streams"
        );
        assert!(!outran, "{:?}", profile.warnings);
        return;
    }
    match held.iter().position(|held| !held) {
        // Never let go: every replay was held until enqueued.
        None => assert!(!outran, "{:?}", profile.warnings),
        Some(first_let_go) => {
            assert!(
                outran,
                "a replay let go without a warning: {:?}",
                profile.warnings
            );
            assert!(
                held[first_let_go..].iter().all(|held| !held),
                "a graph that outran the gate was held again: {held:?}"
            );
        }
    }
    eprintln!(
        "long graph replays held until enqueued: {held:?}; warnings: {:?}",
        profile.warnings
    );
}

/// A dispatch whose work grows with a position held in device memory,
/// captured once and replayed at several positions: each replay records
/// the cost at its own position, a replay not told its position the cost
/// captured.
fn replays_record_the_cost_at_their_position(backend: Backend) {
    let Some(device) = dispatch_profiled_device(backend) else {
        return;
    };
    let kernel = common::inc_one_registry().kernel(&device, "inc_one").unwrap();
    let n = 64;
    let input = device.buffer_from_slice(&random_f32(9, n), &[n]).unwrap();
    let output = device.alloc(DType::F32, &[n]).unwrap();
    let mut encoder = device.command_encoder();
    encoder.begin_capture().unwrap();
    let (base_bytes, base_flops) = (5_000u64, 900u64);
    encoder
        .dispatch(
            inc_one_dispatch(&kernel, &input, &output)
                .cost(base_bytes, 0, base_flops)
                .cost_per_position(10, 100, 4),
        )
        .unwrap();
    let graph = encoder.end_capture().unwrap();
    encoder.replay_at(&graph, 25).unwrap();
    encoder.commit_and_wait_labeled("at 25").unwrap();
    encoder.replay(&graph).unwrap();
    encoder.commit_and_wait_labeled("as captured").unwrap();
    encoder.replay_at(&graph, 3).unwrap();
    encoder.commit_and_wait_labeled("at 3").unwrap();
    if !device.capabilities().dispatch_timing_in_graphs {
        return;
    }
    let groups = device.profiler().dispatches_by_label();
    let cost = |label: &str| {
        let records = &groups.iter().find(|(name, _)| name == label).unwrap().1;
        assert_eq!(records.len(), 1, "{label}");
        (records[0].bytes, records[0].flops)
    };
    assert_eq!(cost("at 25"), (base_bytes + 15 * 100, base_flops + 15 * 4));
    assert_eq!(cost("as captured"), (base_bytes, base_flops));
    assert_eq!(cost("at 3"), (base_bytes - 7 * 100, base_flops - 7 * 4));
}

kernelscope::device_tests!(
    a_graph_too_long_to_hold_still_replays,
    replays_record_the_cost_at_their_position,
    many_replays_are_all_timed_inside_their_submissions,
    two_dispatches_in_one_labeled_submission,
    dispatches_are_grouped_by_label,
    op_kind_propagates_into_dispatch_entry,
    capability_diagnostic,
    unsupported_dispatch_timing_degrades_to_submissions,
    graph_replay_is_profiled_per_dispatch,
);
