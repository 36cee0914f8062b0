//! Mixture-of-experts models against transformers itself: checkpoints of
//! Qwen3-MoE and Mixtral written by transformers (per expert as
//! `save_pretrained` writes them, with a 4.x config, stacked as
//! transformers 5 holds them in memory, and in f32), their logits and
//! greedy tokens, and every sparse layer's choice of experts for every row
//! (tools/reference/make_fixtures.py). On the CPU here; on the GPU with
//! the device suite (`KSCOPE_REQUIRE_GPU=1` makes a missing GPU a failure).

use std::path::{Path, PathBuf};

use kernelscope::ops::sample::Sampling;
use kernelscope::profile::Phase;
use kernelscope::{DType, Device};
use kernelscope_model::{GenerationRequest, LoadOptions, Model, npy};

/// Logits within this of the row's largest |logit| (f32 on both sides on
/// the reference path; the difference is summation order only).
const REFERENCE_TOLERANCE: f32 = 1e-5;

/// The default path (batched prefill with bf16 GEMM inputs, a bf16 KV
/// cache) against the same f32 reference, as for the dense fixtures.
const DEFAULT_PATH_TOLERANCE: f32 = 2e-2;

const MODELS: [&str; 2] = ["qwen3-moe", "mixtral"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf")
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ids(value: &serde_json::Value) -> Vec<u32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_u64().unwrap() as u32)
        .collect()
}

/// The reference's prompt, greedy tokens and logits; `stem` is `NAME` or `NAME.f32`.
fn reference(stem: &str) -> (Vec<u32>, Vec<u32>, Vec<Vec<f32>>) {
    let tokens = json(&root().join(format!("{stem}.tokens.json")));
    let logits = npy::read_f32_2d(&root().join(format!("{stem}.logits.npy"))).unwrap();
    (ids(&tokens["prompt"]), ids(&tokens["generated"]), logits)
}

fn worst_relative(ours: &[Vec<f32>], reference: &[Vec<f32>]) -> f32 {
    assert_eq!(ours.len(), reference.len(), "rows");
    ours.iter()
        .zip(reference)
        .map(|(ours, theirs)| {
            let scale = theirs.iter().fold(0f32, |m, v| m.max(v.abs()));
            let error = ours
                .iter()
                .zip(theirs)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            error / scale
        })
        .fold(0f32, f32::max)
}

/// Generates with `model` as the reference did and checks tokens and logits.
fn check_generation(what: &str, model: &mut Model, stem: &str, tolerance: f32) {
    let (prompt, expected, logits) = reference(stem);
    let generation = model
        .generate(&GenerationRequest {
            stop_at_eos: false,
            keep_logits: true,
            ..GenerationRequest::new(&prompt, expected.len())
        })
        .unwrap();
    assert_eq!(generation.generated, expected, "{what}: greedy tokens differ");
    let worst = worst_relative(&generation.logits, &logits);
    eprintln!("{what}: worst relative error {worst:e}");
    assert!(
        worst <= tolerance,
        "{what}: relative error {worst:e} > {tolerance:e}"
    );
}

fn load(name: &str, layout: &str, device: &Device) -> Model {
    Model::load(
        &root().join(name).join(layout),
        device,
        LoadOptions { quiet: true },
    )
    .unwrap_or_else(|error| panic!("{name}/{layout}: {error}"))
}

/// Every layout on `device`, on the reference path (token by token, f32
/// cache) and the default path.
fn check_layouts_on(name: &str, device: &Device) {
    let mut configs = Vec::new();
    for layout in ["new", "old", "stacked"] {
        for reference_path in [true, false] {
            let mut model = load(name, layout, device);
            if reference_path {
                model.set_prefill_chunk(1).unwrap();
                model.set_kv_dtype(DType::F32).unwrap();
            }
            let tolerance = if reference_path {
                REFERENCE_TOLERANCE
            } else {
                DEFAULT_PATH_TOLERANCE
            };
            let what = format!(
                "{name}/{layout} on {} (reference path: {reference_path})",
                device.name()
            );
            check_generation(&what, &mut model, name, tolerance);
            configs.push(model.config().clone());
        }
    }
    assert!(
        configs.windows(2).all(|pair| pair[0] == pair[1]),
        "{name}: the layouts read differently"
    );
    let mut model = load(name, "f32", device);
    assert_eq!(model.weights().dtype, DType::F32);
    model.set_prefill_chunk(1).unwrap();
    model.set_kv_dtype(DType::F32).unwrap();
    check_generation(
        &format!("{name}/f32 on {}", device.name()),
        &mut model,
        &format!("{name}.f32"),
        REFERENCE_TOLERANCE,
    );
}

/// Steps every row the reference ran, one position at a time, and checks
/// each sparse layer's chosen experts against transformers' top-k.
fn check_routing_on(name: &str, device: &Device) {
    let (prompt, generated, _) = reference(name);
    let routing = json(&root().join(format!("{name}.routing.json")));
    let layers = routing["layers"].as_object().unwrap();
    let mut model = load(name, "new", device);
    model.set_kv_dtype(DType::F32).unwrap();
    let fed: Vec<u32> = prompt
        .iter()
        .chain(&generated[..generated.len() - 1])
        .copied()
        .collect();
    let mut checked = 0;
    for (position, &token) in fed.iter().enumerate() {
        let phase = if position < prompt.len() {
            Phase::Prefill
        } else {
            Phase::Decode
        };
        model.step(token, position, phase, Sampling::GREEDY, 0.0).unwrap();
        let ours = model
            .routing()
            .unwrap()
            .expect("a sparse model reports its routing");
        for (layer, chosen) in ours.iter().enumerate() {
            match layers.get(&layer.to_string()) {
                Some(rows) => {
                    let theirs = ids(&rows[position]);
                    assert_eq!(
                        chosen, &theirs,
                        "{name} row {position} layer {layer}: experts differ"
                    );
                    checked += 1;
                }
                None => assert!(chosen.is_empty(), "{name} layer {layer} is dense but routed"),
            }
        }
    }
    assert!(checked > 10, "{name}: only {checked} choices checked");
}

#[test]
fn transformers_moe_checkpoints_match_in_every_layout() {
    for name in MODELS {
        check_layouts_on(name, &Device::cpu());
    }
}

#[test]
fn routing_is_transformers_top_k_for_every_row_and_layer() {
    for name in MODELS {
        check_routing_on(name, &Device::cpu());
    }
}

#[test]
fn moe_checkpoints_match_transformers_on_the_gpu() {
    let Some(device) = kernelscope::testing::Backend::Cuda.device(kernelscope::DeviceOptions::new()) else {
        return;
    };
    for name in MODELS {
        check_layouts_on(name, &device);
        check_routing_on(name, &device);
    }
}
