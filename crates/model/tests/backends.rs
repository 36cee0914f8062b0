//! The engine on every backend: the GPU's logits and greedy tokens against
//! the CPU reference for each fixture architecture over 64 steps, graph
//! replay against eager launches, and the per-token counters of graph mode
//! (one graph launch, one host sync).

use kernelscope::ops::sample::Sampling;
use kernelscope::profile::Phase;
use kernelscope::testing::Backend;
use kernelscope::{DType, Device, DeviceOptions};
use kernelscope_model::Model;

/// Relative error allowed between backends: max |a - b| over a row divided
/// by the row's largest |logit| (f32 both sides, different summation orders).
const RELATIVE_TOLERANCE: f32 = 1e-4;

fn worst_relative_error(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len(), "rows");
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            let scale = y.iter().fold(0f32, |m, v| m.max(v.abs()));
            x.iter().zip(y).fold(0f32, |m, (p, q)| m.max((p - q).abs())) / scale
        })
        .fold(0f32, f32::max)
}

fn run(device: &Device, preset: &str, seed: u64, graph: bool, steps: usize) -> kernelscope_model::Generation {
    let mut model = Model::from_preset(preset, device, DType::BF16, seed, true).unwrap();
    model.set_graph_mode(graph);
    model
        .generate(&[1, 2, 3, 4, 5], steps, Sampling::GREEDY, 0, false, true)
        .unwrap()
}

fn matches_the_cpu_over_64_steps(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let cpu = Device::cpu();
    for (preset, seed) in [("tiny", 1), ("tiny-qwen2", 2), ("tiny-llama3", 3)] {
        let reference = run(&cpu, preset, seed, false, 64);
        let ours = run(&device, preset, seed, false, 64);
        assert_eq!(
            ours.generated,
            reference.generated,
            "{preset}: greedy tokens on {}",
            device.name()
        );
        let error = worst_relative_error(&ours.logits, &reference.logits);
        eprintln!(
            "{preset} on {}: worst relative logit error vs CPU {error:e}",
            device.name()
        );
        assert!(error <= RELATIVE_TOLERANCE, "{preset}: relative error {error:e}");
    }
}

fn graph_replay_equals_eager(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let eager = run(&device, "tiny-qwen2", 7, false, 24);
    let graph = run(&device, "tiny-qwen2", 7, true, 24);
    assert_eq!(graph.generated, eager.generated);
    assert_eq!(
        graph.logits, eager.logits,
        "same kernels, same inputs: identical logits"
    );
}

fn graph_mode_costs_one_launch_and_one_sync_per_token(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let mut model = Model::from_preset("tiny", &device, DType::BF16, 1, true).unwrap();
    model.set_graph_mode(true);
    model
        .generate(&[1, 2, 3], 12, Sampling::GREEDY, 0, false, false)
        .unwrap();
    let tokens = device.profiler().tokens();
    let decode: Vec<_> = tokens
        .iter()
        .filter(|token| token.phase == Phase::Decode)
        .collect();
    assert_eq!(decode.len(), 11);
    let dispatches_per_step = decode[0].counters.dispatches;
    assert!(
        dispatches_per_step > 30,
        "a whole forward pass per launch: {dispatches_per_step}"
    );
    for token in decode {
        let counters = token.counters;
        assert_eq!(counters.graph_launches, 1, "token {}: {counters:?}", token.index);
        assert_eq!(counters.syncs, 1, "token {}: {counters:?}", token.index);
        assert_eq!(counters.submissions, 1, "token {}: {counters:?}", token.index);
        assert_eq!(
            counters.host_device_copies, 2,
            "token {}: {counters:?}",
            token.index
        );
        assert_eq!(counters.dispatches, dispatches_per_step, "token {}", token.index);
    }
}

kernelscope::device_tests!(
    matches_the_cpu_over_64_steps,
    graph_replay_equals_eager,
    graph_mode_costs_one_launch_and_one_sync_per_token,
);
