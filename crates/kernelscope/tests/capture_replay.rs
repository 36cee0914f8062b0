//! Capture → replay gives the same results as running the same dispatches
//! directly, slice views keep their offsets inside graphs, and replayed
//! dispatches appear in the profile.

mod common;

use kernelscope::profile::ProfileLevel;
use kernelscope::testing::{Backend, random_f32};
use kernelscope::{Buffer, CommandEncoder, DType, DeviceOptions, Kernel};

/// in → middle (+1), then scale middle's second half in place by 3, then
/// middle → out (+1). Uses a slice view so offsets must survive capture.
fn encode_chain(
    encoder: &mut CommandEncoder,
    inc: &Kernel,
    scale: &Kernel,
    input: &Buffer,
    middle: &Buffer,
    output: &Buffer,
) {
    let half = middle.len() / 2;
    let second_half = middle.slice(half, middle.len() - half).unwrap();
    encoder.dispatch(common::inc(inc, input, middle)).unwrap();
    encoder.dispatch(common::scale(scale, &second_half, 3.0)).unwrap();
    encoder.dispatch(common::inc(inc, middle, output)).unwrap();
}

fn replay_matches_direct_execution(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch)) else {
        return;
    };
    let registry = common::inc_one_registry();
    let inc = registry.kernel(&device, "inc_one").unwrap();
    let scale = registry.kernel(&device, "scale_in_place").unwrap();
    let n = 1001; // odd on purpose
    let data = random_f32(20, n);
    let input = device.buffer_from_slice(&data, &[n]).unwrap();
    let direct_middle = device.alloc(DType::F32, &[n]).unwrap();
    let direct_output = device.alloc(DType::F32, &[n]).unwrap();
    let graph_middle = device.alloc(DType::F32, &[n]).unwrap();
    let graph_output = device.alloc(DType::F32, &[n]).unwrap();
    // Poison the graph's outputs so a replay that does nothing cannot pass.
    graph_output.write_from(&vec![f32::NAN; n]).unwrap();

    let mut encoder = device.command_encoder();
    encode_chain(&mut encoder, &inc, &scale, &input, &direct_middle, &direct_output);
    encoder.commit_and_wait_labeled("direct").unwrap();

    encoder.begin_capture().unwrap();
    encode_chain(&mut encoder, &inc, &scale, &input, &graph_middle, &graph_output);
    let graph = encoder.end_capture().unwrap();
    assert!(
        graph_output.to_vec::<f32>().unwrap()[0].is_nan(),
        "capture must not run anything"
    );
    encoder.replay(&graph).unwrap();
    encoder.commit_and_wait_labeled("replay").unwrap();

    let direct = direct_output.to_vec::<f32>().unwrap();
    let replayed = graph_output.to_vec::<f32>().unwrap();
    assert_eq!(direct, replayed);
    let expected: Vec<f32> = data
        .iter()
        .enumerate()
        .map(|(i, x)| {
            if i >= n / 2 {
                (x + 1.0) * 3.0 + 1.0
            } else {
                x + 2.0
            }
        })
        .collect();
    assert_eq!(direct, expected, "the slice view scaled exactly the second half");

    let groups = device.profiler().dispatches_by_label();
    let count = |label: &str| groups.iter().find(|(l, _)| l == label).map(|(_, e)| e.len());
    assert_eq!(count("direct"), Some(3));
    assert_eq!(count("replay"), Some(3), "replayed dispatches are profiled too");
    let kernels: Vec<String> = groups[1].1.iter().map(|e| e.kernel.to_string()).collect();
    assert_eq!(kernels, ["inc_one", "scale_in_place", "inc_one"]);
}

fn encoder_refuses_misuse(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let inc = common::inc_one_registry().kernel(&device, "inc_one").unwrap();
    let a = device.buffer_from_slice(&random_f32(21, 8), &[8]).unwrap();
    let b = device.alloc(DType::F32, &[8]).unwrap();
    let mut encoder = device.command_encoder();
    assert!(encoder.end_capture().is_err(), "end_capture without begin");
    encoder.dispatch(common::inc(&inc, &a, &b)).unwrap();
    let error = encoder.begin_capture().unwrap_err().to_string();
    assert!(error.contains("commit the pending dispatches"), "{error}");
    encoder.commit().unwrap();
    encoder.begin_capture().unwrap();
    assert!(encoder.begin_capture().is_err(), "nested capture");
    let error = encoder.commit().unwrap_err().to_string();
    assert!(error.contains("end the capture"), "{error}");
    let graph = encoder.end_capture().unwrap();
    assert_eq!(graph.dispatch_count(), 0);
}

/// A read started with `read_later` sees the buffer as of its place in the
/// stream, while work queued after it (replays that change the buffer) runs
/// on: the pattern of a pipelined decode loop. Counts one copy when started
/// and one sync when waited for; a read dropped unread is harmless.
fn read_later_sees_its_place_in_the_stream(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new().profile(ProfileLevel::Submission)) else {
        return;
    };
    let inc = common::inc_one_registry().kernel(&device, "inc_one").unwrap();
    let n = 1001;
    let start = random_f32(21, n);
    let ping = device.buffer_from_slice(&start, &[n]).unwrap();
    let pong = device.alloc(DType::F32, &[n]).unwrap();
    let mut encoder = device.command_encoder();
    encoder.begin_capture().unwrap();
    for (from, to) in [(&ping, &pong), (&pong, &ping)] {
        encoder
            .dispatch(
                kernelscope::Dispatch::new(&inc)
                    .read(from)
                    .write(to)
                    .param(n as u32)
                    .grid(kernelscope::runtime::LaunchGrid::linear(n, 128)),
            )
            .unwrap();
    }
    let graph = encoder.end_capture().unwrap();
    let counters = || device.profiler().counters().snapshot();
    let mut reads = Vec::new();
    for _ in 0..6 {
        encoder.replay(&graph).unwrap();
        encoder.commit().unwrap();
        let before = counters();
        reads.push(ping.read_later::<f32>().unwrap());
        let after = counters();
        assert_eq!(after.host_device_copies, before.host_device_copies + 1);
        assert_eq!(after.syncs, before.syncs, "starting a read does not wait");
    }
    let unread = ping.read_later::<f32>().unwrap();
    drop(unread);
    for (replays, read) in reads.into_iter().enumerate() {
        let before = counters().syncs;
        let values = read.wait().unwrap();
        assert_eq!(counters().syncs, before + 1);
        let expected: Vec<f32> = start
            .iter()
            .map(|value| {
                let mut value = *value;
                for _ in 0..2 * (replays + 1) {
                    value += 1.0;
                }
                value
            })
            .collect();
        assert_eq!(values, expected, "read after replay {replays}");
    }
    ping.to_vec::<f32>().unwrap();
    let profile = device.profile(device.conditions("read later", None));
    assert_eq!(profile.submissions.len(), 6, "every submission timed");
}

kernelscope::device_tests!(
    replay_matches_direct_execution,
    encoder_refuses_misuse,
    read_later_sees_its_place_in_the_stream,
);
