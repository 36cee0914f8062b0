//! Batched prefill against the token-by-token path, on every backend and
//! fixture architecture: the logits of every prompt position agree for
//! prompts shorter than a chunk, exactly one chunk, one past it and several
//! chunks; a later token never changes an earlier position's logits (the
//! causal mask); greedy decode continues the same after either prefill; a
//! bf16 KV cache stays close to an f32 one.

use kernelscope::profile::ProfileLevel;
use kernelscope::testing::Backend;
use kernelscope::{DType, Device, DeviceOptions, OpKind};
use kernelscope_model::{GenerationRequest, Model, ModelError, SyntheticOptions};

mod common;
use common::worst_relative_error;

/// The chunk the tests batch by: small, so several chunks fit in short prompts.
const CHUNK: usize = 8;

/// f32 weights and KV cache: both paths do the same math in f32 and differ
/// only in summation order, so rows agree to f32 rounding (max |a - b| over
/// a row divided by the row's largest |logit|).
const F32_TOLERANCE: f32 = 1e-4;

/// bf16 weights and KV cache: batched prefill rounds what feeds each GEMM to
/// bf16 (as PyTorch does for a bf16 model) where the token-by-token
/// mat-vec reads f32 activations, so rows differ by a few bf16 roundings
/// (2^-8 relative each) carried through the layers.
const BF16_TOLERANCE: f32 = 3e-2;

const PRESETS: [(&str, u64); 3] = [("tiny", 1), ("tiny-qwen2", 2), ("tiny-llama3", 3)];

fn model(device: &Device, preset: &str, seed: u64, dtype: DType, chunk: usize) -> Model {
    let mut model = Model::from_preset(
        preset,
        device,
        SyntheticOptions {
            dtype,
            seed,
            quiet: true,
        },
    )
    .unwrap();
    model.set_prefill_chunk(chunk).unwrap();
    model
}

/// A prompt of `length` tokens from `seed`, within the vocabulary.
fn prompt(model: &Model, length: usize, seed: u64) -> Vec<u32> {
    let vocab = model.config().vocab_size as u64;
    let mut rng = kernelscope::rng::SplitMix64::new(seed);
    (0..length).map(|_| rng.below(vocab) as u32).collect()
}

/// The logits of every prompt position and of the generated tokens but the
/// last, and the generated tokens.
fn run(model: &mut Model, prompt: &[u32], generate: usize) -> (Vec<Vec<f32>>, Vec<u32>) {
    let generation = model
        .generate(&GenerationRequest {
            stop_at_eos: false,
            keep_logits: true,
            ..GenerationRequest::new(prompt, generate)
        })
        .unwrap();
    (generation.logits, generation.generated)
}

fn batched_prefill_matches_token_by_token(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    for (dtype, tolerance) in [(DType::F32, F32_TOLERANCE), (DType::BF16, BF16_TOLERANCE)] {
        for (preset, seed) in PRESETS {
            let mut stepped = model(&device, preset, seed, dtype, 1);
            let mut batched = model(&device, preset, seed, dtype, CHUNK);
            for length in [1, 2, 7, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 2] {
                let tokens = prompt(&stepped, length, seed * 100 + length as u64);
                let (reference, reference_tokens) = run(&mut stepped, &tokens, 4);
                let (logits, generated) = run(&mut batched, &tokens, 4);
                assert_eq!(
                    logits.len(),
                    length + 3,
                    "a row per prompt position and decode step"
                );
                let error = worst_relative_error(&logits, &reference);
                eprintln!("{preset} {dtype} prompt {length}: worst relative error {error:e}");
                assert!(
                    error <= tolerance,
                    "{preset} {dtype} prompt of {length} on {}: relative error {error:e} > {tolerance:e}",
                    device.name()
                );
                if dtype == DType::F32 {
                    assert_eq!(
                        generated, reference_tokens,
                        "{preset} prompt {length}: greedy tokens"
                    );
                }
            }
        }
    }
}

fn a_later_token_never_changes_earlier_logits(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    for (preset, seed) in PRESETS {
        let mut batched = model(&device, preset, seed, DType::F32, CHUNK);
        let length = 2 * CHUNK + 3;
        let original = prompt(&batched, length, seed);
        let (before, _) = run(&mut batched, &original, 1);
        for changed_at in [1, CHUNK - 1, CHUNK + 4, length - 1] {
            let mut changed = original.clone();
            changed[changed_at] = (changed[changed_at] + 1) % batched.config().vocab_size as u32;
            let (after, _) = run(&mut batched, &changed, 1);
            for position in 0..changed_at {
                assert_eq!(
                    after[position], before[position],
                    "{preset}: changing token {changed_at} changed position {position}'s logits"
                );
            }
            assert_ne!(
                after[changed_at], before[changed_at],
                "{preset}: the changed position's own logits must change (else this test proves nothing)"
            );
        }
    }
}

fn bf16_kv_cache_stays_close_to_f32(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    for (preset, seed) in PRESETS {
        let mut reference = model(&device, preset, seed, DType::F32, CHUNK);
        reference.set_kv_dtype(DType::F32).unwrap();
        let mut narrow = model(&device, preset, seed, DType::F32, CHUNK);
        narrow.set_kv_dtype(DType::BF16).unwrap();
        let tokens = prompt(&reference, 2 * CHUNK + 5, seed);
        let (expected, _) = run(&mut reference, &tokens, 6);
        let (logits, _) = run(&mut narrow, &tokens, 6);
        let error = worst_relative_error(&logits, &expected);
        eprintln!("{preset}: bf16 KV cache vs f32, worst relative error {error:e}");
        assert!(error <= BF16_TOLERANCE, "{preset}: {error:e}");
        assert!(error > 0.0, "{preset}: the bf16 cache must round something");
    }
}

/// A batched prefill profiled at dispatch level: the GEMMs appear as
/// dispatches under their layer's scope with their flops (on CUDA, as the
/// library's own kernels, timed by CUPTI), and the dispatch times add up to
/// the submission's within 5 %. On a GPU the model has Llama-3.2-1B's
/// layer shapes (two layers, a 32k vocabulary, so it is quick to write):
/// the tiny fixtures' kernels take less time than their launches, which
/// leaves the device idle between them and says nothing of the clocks.
fn batched_prefill_profile_shows_the_gemm_kernels(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch)) else {
        return;
    };
    let mut model = match backend {
        Backend::Cpu => model(&device, "tiny-llama3", 3, DType::BF16, 64),
        Backend::Cuda => {
            let mut config = kernelscope_model::preset("llama-3.2-1b").unwrap();
            config.num_layers = 2;
            config.vocab_size = 32_000;
            config.eos_token_ids.clear();
            let directory =
                std::env::temp_dir().join(format!("kscope-prefill-profile-{}", std::process::id()));
            kernelscope_model::synthetic::write_checkpoint(
                &config,
                &directory,
                SyntheticOptions {
                    dtype: DType::BF16,
                    seed: 4,
                    quiet: true,
                },
            )
            .unwrap();
            let model = Model::load(
                &directory,
                &device,
                kernelscope_model::LoadOptions { quiet: true },
            );
            std::fs::remove_dir_all(&directory).unwrap();
            let mut model = model.unwrap();
            model.set_prefill_chunk(512).unwrap();
            // As `kscope run` and `bench` run it: one replay per chunk, held
            // until enqueued, so the device never waits for CUPTI's host
            // work between kernels (eagerly, it does: the cross-check then
            // shows the gaps, rightly, as time the kernels did not take).
            model.set_execution_mode(kernelscope_model::ExecutionMode::fastest_on(&device));
            model
        }
    };
    let tokens = prompt(&model, model.prefill_chunk(), 5);
    for _ in 0..3 {
        model.prefill(&tokens, 0).unwrap();
    }
    let profile = device.profile(device.conditions("eager", None));
    let gemms: Vec<_> = profile
        .dispatches
        .iter()
        .filter(|record| record.op_kind == OpKind::MatMul)
        .collect();
    let layers = model.config().num_layers;
    assert!(
        gemms.len() >= 3 * 7 * layers,
        "7 GEMMs per layer per prefill: {}",
        gemms.len()
    );
    assert!(gemms.iter().all(|record| record.scope.starts_with("layer.")));
    let flops: u64 = gemms.iter().map(|record| record.flops).sum();
    assert!(flops > 0);
    if backend == Backend::Cuda && device.capabilities().dispatch_timing_in_graphs {
        assert!(
            gemms.iter().all(|record| !record.kernel.starts_with("matmul_")),
            "the library's kernels, by their own names"
        );
    }
    assert!(
        gemms.iter().all(|record| record.end_ns > record.start_ns),
        "timed"
    );
    let checks = kernelscope::profile::cross_check(&profile);
    let prefill = checks
        .iter()
        .find(|check| check.label == "prefill")
        .expect("prefill cross-check");
    assert_eq!(prefill.submissions, 3);
    // The clocks agree: the library's kernels sit inside their submission,
    // one at a time. What is left of the span is idle time (launch gaps on a
    // tiny model run eagerly), accounted for to the nanosecond.
    assert!(!prefill.flagged, "{prefill:?}");
    assert!(prefill.dispatch_sum_ns <= prefill.submission_ns, "{prefill:?}");
    assert_eq!(prefill.idle.span_ns(), prefill.submission_ns, "{prefill:?}");
}

fn a_zero_chunk_is_refused(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let mut model = model(&device, "tiny", 1, DType::F32, CHUNK);
    let error = model.set_prefill_chunk(0).unwrap_err();
    assert!(
        matches!(
            error,
            ModelError::InvalidCount {
                field: "prefill chunk positions",
                value: 0,
                minimum: 1
            }
        ),
        "{error}"
    );
    // The library names the setting, not a flag of kscope's.
    assert!(!error.to_string().contains("--"), "{error}");
    assert_eq!(model.prefill_chunk(), CHUNK);
}

kernelscope::device_tests!(
    batched_prefill_matches_token_by_token,
    a_later_token_never_changes_earlier_logits,
    bf16_kv_cache_stays_close_to_f32,
    batched_prefill_profile_shows_the_gemm_kernels,
    a_zero_chunk_is_refused,
);
