//! The engine on every backend: the GPU's logits and greedy tokens against
//! the CPU reference for each fixture architecture over 64 steps, graph
//! replay against eager launches, the per-token counters of graph mode
//! (one graph launch, one host sync), and the same work per token whether
//! the logits are kept or not.

use kernelscope::ops::sample::Sampling;
use kernelscope::profile::{CounterSnapshot, Phase};
use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;
use kernelscope::{DType, Device, DeviceOptions};
use kernelscope_model::{ExecutionMode, GenerationRequest, Model, SyntheticOptions, preset as preset_config};

mod common;
use common::worst_relative_error;

/// Relative error allowed between backends: max |a - b| over a row divided
/// by the row's largest |logit| (f32 both sides, different summation orders).
const RELATIVE_TOLERANCE: f32 = 1e-4;

/// The default path (batched prefill, bf16 KV cache) against the CPU: each
/// backend rounds GEMM inputs and cached keys and values to bf16, and an f32
/// value a summation order apart can round to the neighbouring bf16 (2^-8
/// relative), which the later layers carry.
const DEFAULT_PATH_TOLERANCE: f32 = 2e-2;

fn run(device: &Device, preset: &str, seed: u64, graph: bool, steps: usize) -> kernelscope_model::Generation {
    run_on_path(device, preset, seed, graph, steps, false, false)
}

/// A `steps`-step generation; on the reference path (`reference`: token by
/// token, f32 KV cache) every backend computes in f32; `f32_cache` keeps
/// the batched prefill with an f32 KV cache.
fn run_on_path(
    device: &Device,
    preset: &str,
    seed: u64,
    graph: bool,
    steps: usize,
    reference: bool,
    f32_cache: bool,
) -> kernelscope_model::Generation {
    let mut model = Model::from_preset(
        preset,
        device,
        SyntheticOptions {
            dtype: DType::BF16,
            seed,
            quiet: true,
        },
    )
    .unwrap();
    if reference {
        model.set_prefill_chunk(1).unwrap();
    }
    if reference || f32_cache {
        model.set_kv_dtype(DType::F32).unwrap();
    }
    model.set_execution_mode(if graph {
        ExecutionMode::Graph
    } else {
        ExecutionMode::Eager
    });
    model
        .generate(&GenerationRequest {
            stop_at_eos: false,
            keep_logits: true,
            ..GenerationRequest::new(&[1, 2, 3, 4, 5], steps)
        })
        .unwrap()
}

fn matches_the_cpu_over_64_steps(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let cpu = Device::cpu();
    for (preset, seed) in [
        ("tiny", 1),
        ("tiny-qwen2", 2),
        ("tiny-llama3", 3),
        ("tiny-qwen3", 4),
        ("tiny-qwen3-moe", 5),
        ("tiny-mixtral", 6),
    ] {
        // The default path, up to the first token the two backends choose
        // differently (after it, they run different sequences). A sparse
        // model's with an f32 cache: a bf16 one rounds values a summation
        // order apart to neighbouring bf16s, and a router near a tie then
        // picks another expert, so the logits jump while the tokens stay
        // the same (17 % at row 62 of tiny-qwen3-moe on an H200, measured
        // with `kscope run --logits-out` per path; the prefill's grouped
        // GEMMs and every decode kernel agreed to 2e-3 with an f32 cache, and
        // the bf16 cache alone, token by token, to 1.5e-4).
        let sparse = preset_config(preset).unwrap().experts.is_some();
        let (reference, ours) = (
            run_on_path(&cpu, preset, seed, false, 64, false, sparse),
            run_on_path(&device, preset, seed, false, 64, false, sparse),
        );
        let same = 5 + ours
            .generated
            .iter()
            .zip(&reference.generated)
            .take_while(|(a, b)| a == b)
            .count()
            .min(63);
        let error = worst_relative_error(&ours.logits[..same], &reference.logits[..same]);
        eprintln!(
            "{preset} default path on {}: {same} rows, worst relative error vs CPU {error:e}",
            device.name()
        );
        assert!(
            error <= DEFAULT_PATH_TOLERANCE,
            "{preset}: default path, relative error {error:e}"
        );

        let reference = run_on_path(&cpu, preset, seed, false, 64, true, true);
        let ours = run_on_path(&device, preset, seed, false, 64, true, true);
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
    // A sparse model's experts read their ids from device memory, so its
    // step replays as one graph too.
    for preset in ["tiny-qwen2", "tiny-qwen3-moe", "tiny-mixtral"] {
        let eager = run(&device, preset, 7, false, 24);
        let graph = run(&device, preset, 7, true, 24);
        assert_eq!(graph.generated, eager.generated, "{preset}");
        assert_eq!(
            graph.logits, eager.logits,
            "{preset}: same kernels, same inputs: identical logits"
        );
    }
}

/// Graphs whose kernels launch early (the default: programmatic dependent
/// launch, each kernel's blocks start as its predecessor's exit, and wait
/// for its writes) and graphs launched serially both give the logits of
/// eager launches bit for bit, fused and unfused: the wait, not the launch
/// order, keeps every read after the write it needs. On a device without
/// early launch both are serial and the test checks graph against eager.
fn early_launch_graphs_equal_eager(backend: Backend) {
    for options in [DeviceOptions::new(), DeviceOptions::new().serial_launch()] {
        early_launch_graphs_equal_eager_with(backend, options);
    }
}

fn early_launch_graphs_equal_eager_with(backend: Backend, options: DeviceOptions) {
    let Some(early) = backend.device(options) else {
        return;
    };
    for (preset, seed, fusion) in [("tiny-llama3", 11, true), ("tiny-qwen2", 12, false)] {
        let generate = |mode| {
            let mut model = Model::from_preset(
                preset,
                &early,
                SyntheticOptions {
                    dtype: DType::BF16,
                    seed,
                    quiet: true,
                },
            )
            .unwrap();
            model.set_fusion(fusion);
            model.set_execution_mode(mode);
            model
                .generate(&GenerationRequest {
                    stop_at_eos: false,
                    keep_logits: true,
                    ..GenerationRequest::new(&[1, 2, 3, 4, 5], 24)
                })
                .unwrap()
        };
        let eager = generate(ExecutionMode::Eager);
        let graph = generate(ExecutionMode::Graph);
        assert_eq!(graph.generated, eager.generated, "{preset}");
        assert_eq!(graph.logits, eager.logits, "{preset}: identical logits");
    }
}

/// Relative logit error allowed between the fused and unfused kernels on
/// one device: the same f32 math, summed in a different order (a fused
/// kernel normalises x with 256 threads where RMSNorm used up to 1024).
const FUSION_TOLERANCE: f32 = 1e-4;

/// The fused kernels replayed as graphs against the unfused ops launched
/// one by one, for every fixture architecture: the same greedy tokens and
/// logits within [`FUSION_TOLERANCE`], and fewer dispatches per token.
fn fused_graph_path_equals_unfused_eager_path(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    for (preset, seed) in [
        ("tiny", 1),
        ("tiny-qwen2", 2),
        ("tiny-llama3", 3),
        ("tiny-qwen3", 4),
        ("tiny-qwen3-moe", 5),
        ("tiny-mixtral", 6),
    ] {
        let mut generations = Vec::new();
        for (fusion, mode) in [(false, ExecutionMode::Eager), (true, ExecutionMode::Graph)] {
            let mut model = Model::from_preset(
                preset,
                &device,
                SyntheticOptions {
                    dtype: DType::BF16,
                    seed,
                    quiet: true,
                },
            )
            .unwrap();
            model.set_prefill_chunk(1).unwrap();
            // An f32 cache: a bf16 one rounds values a summation order
            // apart to neighbouring bf16s now and then (2^-8 relative),
            // which a router's softmax carries further than the tolerance.
            model.set_kv_dtype(DType::F32).unwrap();
            model.set_fusion(fusion);
            assert_eq!(model.fusion(), fusion);
            model.set_execution_mode(mode);
            let before = device.profiler().counters().snapshot().dispatches;
            let generation = model
                .generate(&GenerationRequest {
                    stop_at_eos: false,
                    keep_logits: true,
                    ..GenerationRequest::new(&[1, 2, 3, 4, 5], 32)
                })
                .unwrap();
            generations.push((
                generation,
                device.profiler().counters().snapshot().dispatches - before,
            ));
        }
        let [(unfused, unfused_dispatches), (fused, fused_dispatches)] =
            <[_; 2]>::try_from(generations).unwrap();
        assert_eq!(fused.generated, unfused.generated, "{preset}: greedy tokens");
        let error = worst_relative_error(&fused.logits, &unfused.logits);
        eprintln!(
            "{preset} on {}: fused against unfused, worst relative logit error {error:e}",
            device.name()
        );
        assert!(error <= FUSION_TOLERANCE, "{preset}: relative error {error:e}");
        assert!(
            fused_dispatches < unfused_dispatches,
            "{preset}: fused {fused_dispatches} dispatches, unfused {unfused_dispatches}"
        );
    }
}

fn graph_mode_costs_one_launch_and_one_sync_per_token(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let mut model = Model::from_preset(
        "tiny",
        &device,
        SyntheticOptions {
            dtype: DType::BF16,
            seed: 1,
            quiet: true,
        },
    )
    .unwrap();
    model.set_execution_mode(ExecutionMode::Graph);
    model
        .generate(&GenerationRequest {
            stop_at_eos: false,
            ..GenerationRequest::new(&[1, 2, 3], 12)
        })
        .unwrap();
    let tokens = device.profiler().tokens();
    let decode: Vec<_> = tokens
        .iter()
        .filter(|token| token.phase == Phase::Decode)
        .collect();
    assert_eq!(decode.len(), 11);
    let dispatches_per_step = decode[0].counters.dispatches;
    // tiny's four layers take at least five dispatches each, fused (norm,
    // q/k/v and RoPE; attention; o_proj; norm and gate/up; down).
    assert!(
        dispatches_per_step >= 4 * 5,
        "a whole forward pass per launch: {dispatches_per_step}"
    );
    // Decode is pipelined: token N+1 is queued before token N is read back,
    // so the wait for token N lands in token N+1's window: the first decode
    // token shows no sync, the last two, every other exactly one.
    let last = decode.len() - 1;
    let syncs: u64 = decode.iter().map(|token| token.counters.syncs).sum();
    assert_eq!(syncs, decode.len() as u64, "one host sync per token in all");
    for (position, token) in decode.into_iter().enumerate() {
        let counters = token.counters;
        assert_eq!(counters.graph_launches, 1, "token {}: {counters:?}", token.index);
        let expected_syncs = match position {
            0 => 0,
            p if p == last => 2,
            _ => 1,
        };
        assert_eq!(
            counters.syncs, expected_syncs,
            "token {}: {counters:?}",
            token.index
        );
        assert_eq!(counters.submissions, 1, "token {}: {counters:?}", token.index);
        assert_eq!(
            counters.host_device_copies, 2,
            "token {}: {counters:?}",
            token.index
        );
        assert_eq!(counters.dispatches, dispatches_per_step, "token {}", token.index);
    }
}

/// Graph mode queues step N+1 before reading step N back (the graph feeds
/// its choice into the next step's token slot on the device): the tokens
/// must be those of eager step-by-step decoding, and a stop asked for after
/// k tokens must give exactly those k.
fn pipelined_decode_matches_step_by_step(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let prompt = [3, 1, 4, 1, 5];
    let tokens = |graph: bool| {
        let mut model = Model::from_preset(
            "tiny-llama3",
            &device,
            SyntheticOptions {
                dtype: DType::BF16,
                seed: 9,
                quiet: true,
            },
        )
        .unwrap();
        model.set_execution_mode(if graph {
            ExecutionMode::Graph
        } else {
            ExecutionMode::Eager
        });
        model
            .generate(&GenerationRequest {
                stop_at_eos: false,
                ..GenerationRequest::new(&prompt, 40)
            })
            .unwrap()
            .generated
    };
    let eager = tokens(false);
    assert_eq!(eager.len(), 40);
    assert_eq!(tokens(true), eager, "pipelined graph decode on {}", device.name());

    let mut model = Model::from_preset(
        "tiny-llama3",
        &device,
        SyntheticOptions {
            dtype: DType::BF16,
            seed: 9,
            quiet: true,
        },
    )
    .unwrap();
    model.set_execution_mode(ExecutionMode::Graph);
    let first = model
        .generate(&GenerationRequest {
            stop_at_eos: false,
            ..GenerationRequest::new(&prompt, 1)
        })
        .unwrap();
    let mut seen = Vec::new();
    model
        .decode_greedy(first.generated[0], prompt.len(), 30, |token| {
            seen.push(token);
            seen.len() < 7
        })
        .unwrap();
    assert_eq!(seen, eager[1..8], "stopped after 7 tokens");
}

/// Keeping the logits (`--logits-out`) only reads them back as well: every
/// decode token runs the same submissions, dispatches, barriers and graph
/// launches with and without them, in either execution mode, greedy or
/// sampled. A batched prefill chunk (one profiler window; one replay in
/// graph mode) computes every row's logits when they are kept (a norm and a
/// GEMM over the rows, and a copy of the last row, which is computed as
/// without kept logits so the choice is the same): three dispatches more,
/// and at most a barrier before each (as the dataflow of the rows needs).
fn keeping_logits_runs_the_same_work_per_token(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("seed {seed}");
    let mut rng = SplitMix64::new(seed);
    let prompt: Vec<u32> = (0..1 + rng.below(6)).map(|_| rng.below(256) as u32).collect();
    let max_tokens = 2 + rng.below(10) as usize;
    let sampled = Sampling {
        temperature: 0.5 + rng.next_f32(),
        top_p: 0.5 + rng.next_f32() / 2.0,
    };
    for mode in [ExecutionMode::Eager, ExecutionMode::Graph] {
        for sampling in [Sampling::GREEDY, sampled] {
            let run = |keep_logits: bool| {
                let options = SyntheticOptions {
                    dtype: DType::BF16,
                    seed: 5,
                    quiet: true,
                };
                let mut model = Model::from_preset("tiny-qwen2", &device, options).unwrap();
                model.set_execution_mode(mode);
                device.profiler().reset();
                let request = GenerationRequest {
                    sampling,
                    seed,
                    stop_at_eos: false,
                    keep_logits,
                    ..GenerationRequest::new(&prompt, max_tokens)
                };
                let generation = model.generate(&request).unwrap();
                (generation, device.profiler().tokens())
            };
            let (plain, plain_tokens) = run(false);
            let (kept, kept_tokens) = run(true);
            let context = format!("{mode:?}, {sampling:?}, prompt {prompt:?}, seed {seed}");
            assert_eq!(kept.generated, plain.generated, "{context}");
            assert_eq!(plain.generated.len(), max_tokens, "{context}");
            assert!(plain.logits.is_empty(), "{context}");
            assert_eq!(kept.logits.len(), prompt.len() + max_tokens - 1, "{context}");
            assert_eq!(kept_tokens.len(), plain_tokens.len(), "{context}");
            let decode = plain_tokens.iter().filter(|token| token.phase == Phase::Decode);
            assert_eq!(decode.count(), max_tokens - 1, "{context}");
            let work = |counters: CounterSnapshot| {
                (
                    counters.submissions,
                    counters.dispatches,
                    counters.barriers,
                    counters.graph_launches,
                )
            };
            for (plain, kept) in plain_tokens.iter().zip(&kept_tokens) {
                assert_eq!(plain.phase, kept.phase, "{context}");
                let what = format!("{context}: token {} ({:?})", plain.index, plain.phase);
                if plain.phase == Phase::Prefill {
                    let (plain, kept) = (work(plain.counters), work(kept.counters));
                    assert_eq!(
                        (kept.0, kept.1, kept.3),
                        (plain.0, plain.1 + 3, plain.3),
                        "{what}"
                    );
                    assert!(
                        (plain.2..=plain.2 + 3).contains(&kept.2),
                        "{what}: barriers {kept:?} vs {plain:?}"
                    );
                    let replays = u64::from(mode == ExecutionMode::Graph);
                    assert_eq!(plain.3, replays, "{what}: one replay per chunk in graph mode");
                    continue;
                }
                assert_eq!(work(kept.counters), work(plain.counters), "{what}");
                // The logits are one more read per token, waited for where
                // the token is: pipelining (graph decode waits for token N in
                // token N+1's window) is kept.
                let (plain, kept) = (plain.counters, kept.counters);
                assert_eq!(kept.host_device_copies, plain.host_device_copies + 1, "{context}");
                assert_eq!(kept.syncs, 2 * plain.syncs, "{context}");
                let expected_launches = u64::from(mode == ExecutionMode::Graph);
                assert_eq!(plain.graph_launches, expected_launches, "{context}");
            }
        }
    }
}

kernelscope::device_tests!(
    fused_graph_path_equals_unfused_eager_path,
    keeping_logits_runs_the_same_work_per_token,
    pipelined_decode_matches_step_by_step,
    matches_the_cpu_over_64_steps,
    graph_replay_equals_eager,
    early_launch_graphs_equal_eager,
    graph_mode_costs_one_launch_and_one_sync_per_token,
);
