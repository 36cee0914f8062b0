//! Correctness against a reference no one here wrote: for each fixture the
//! synthetic checkpoint is regenerated (and must be byte-identical to the
//! one the reference saw), run by our CPU engine, and its logits and greedy
//! tokens compared with those of Hugging Face transformers.

use std::path::{Path, PathBuf};

use kernelscope::{DType, Device};
use kernelscope_model::{GenerationRequest, LoadOptions, Model, SyntheticOptions, npy, preset, synthetic};

/// Relative tolerance of the reference path: max |ours - reference| over a
/// row, divided by the row's largest |reference| logit. f32 on both sides;
/// the difference is summation order only.
const RELATIVE_TOLERANCE: f32 = 1e-5;

/// Relative tolerance of the default path against the same f32 reference:
/// batched prefill rounds what feeds each GEMM to the weights' dtype (bf16,
/// as transformers running the model in bf16 does), and the KV cache holds
/// bf16; each rounding is 2^-9 relative, carried through the layers.
const DEFAULT_PATH_TOLERANCE: f32 = 2e-2;

/// The reference paths compute in f32, so where the rounding path was
/// chosen (bf16 mat-vecs with x in two bf16 parts, 16 bits of its mantissa,
/// within 2e-5 here), this binary takes the exact path; every test calls
/// this first, before any product, so none runs on both.
fn exact_cpu_products() {
    use kernelscope::cpu_simd::dot::{DotPath, dot_path, force_dot_path};
    if dot_path() == DotPath::Avx512Bf16 {
        force_dot_path(DotPath::Avx512Bf16Exact).unwrap();
    }
}

/// How the engine is run against the reference.
#[derive(Clone, Copy, Debug, PartialEq)]
enum EnginePath {
    /// Token by token with an f32 KV cache: the engine computes in f32 as
    /// the reference does.
    Reference,
    /// The reference path with the fused decode kernels turned off: one
    /// dispatch per op.
    Unfused,
    /// The defaults: batched prefill, a KV cache in the weights' dtype and
    /// the fused decode kernels.
    Default,
}

impl EnginePath {
    const ALL: [EnginePath; 3] = [EnginePath::Reference, EnginePath::Unfused, EnginePath::Default];

    fn tolerance(self) -> f32 {
        match self {
            EnginePath::Reference | EnginePath::Unfused => RELATIVE_TOLERANCE,
            EnginePath::Default => DEFAULT_PATH_TOLERANCE,
        }
    }

    /// `model` set up for this path.
    fn apply(self, model: &mut Model) {
        if self != EnginePath::Default {
            model.set_prefill_chunk(1).unwrap();
            model.set_kv_dtype(DType::F32).unwrap();
        }
        model.set_fusion(self != EnginePath::Unfused);
    }
}

struct Fixture {
    preset: &'static str,
    seed: u64,
    digest: u64,
}

const FIXTURES: [Fixture; 3] = [
    Fixture {
        preset: "tiny",
        seed: 1,
        digest: 0x2419_56a9_5aec_fddb,
    },
    Fixture {
        preset: "tiny-qwen2",
        seed: 2,
        digest: 0x8664_66d4_1037_7640,
    },
    Fixture {
        preset: "tiny-llama3",
        seed: 3,
        digest: 0x47f6_7506_7b15_78b2,
    },
];

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn reference_tokens(name: &str) -> (Vec<u32>, Vec<u32>) {
    let text = std::fs::read_to_string(fixtures_dir().join(format!("{name}.tokens.json"))).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = |key: &str| {
        value[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect()
    };
    (ids("prompt"), ids("generated"))
}

fn check_fixture(fixture: &Fixture) {
    let directory =
        std::env::temp_dir().join(format!("kscope-parity-{}-{}", fixture.preset, std::process::id()));
    let config = preset(fixture.preset).unwrap();
    synthetic::write_checkpoint(
        &config,
        &directory,
        SyntheticOptions {
            dtype: DType::BF16,
            seed: fixture.seed,
            quiet: true,
        },
    )
    .unwrap();
    let digest = synthetic::file_digest(&directory.join("model.safetensors")).unwrap();
    assert_eq!(
        digest, fixture.digest,
        "{}: the generator's bytes changed (digest {digest:016x}); the reference logits no longer apply",
        fixture.preset
    );

    let (prompt, expected_tokens) = reference_tokens(fixture.preset);
    let reference = npy::read_f32_2d(&fixtures_dir().join(format!("{}.logits.npy", fixture.preset))).unwrap();
    for path in EnginePath::ALL {
        let mut model = Model::load(&directory, &Device::cpu(), LoadOptions { quiet: true }).unwrap();
        path.apply(&mut model);
        let generation = model
            .generate(&GenerationRequest {
                stop_at_eos: false,
                keep_logits: true,
                ..GenerationRequest::new(&prompt, expected_tokens.len())
            })
            .unwrap();
        let what = format!("{} ({path:?} path)", fixture.preset);
        assert_eq!(
            generation.generated, expected_tokens,
            "{what}: greedy tokens differ"
        );
        assert_eq!(generation.logits.len(), reference.len(), "{what}: rows");
        assert_logits_close(&what, &generation.logits, &reference, path.tolerance());
    }
    std::fs::remove_dir_all(&directory).unwrap();
}

/// Every row within `tolerance` of the reference's.
fn assert_logits_close(what: &str, ours: &[Vec<f32>], reference: &[Vec<f32>], tolerance: f32) {
    assert_eq!(ours.len(), reference.len(), "{what}: rows");
    let mut worst = 0f32;
    for (row, (ours, theirs)) in ours.iter().zip(reference).enumerate() {
        assert_eq!(ours.len(), theirs.len());
        let scale = theirs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let (index, error) = ours
            .iter()
            .zip(theirs)
            .map(|(a, b)| (a - b).abs())
            .enumerate()
            .fold((0, 0f32), |best, (i, e)| if e > best.1 { (i, e) } else { best });
        let relative = error / scale;
        worst = worst.max(relative);
        assert!(
            relative <= tolerance,
            "{what} row {row}: logit {index} is {} vs reference {} (relative error {relative:e} > {tolerance:e})",
            ours[index],
            theirs[index]
        );
    }
    eprintln!("{what}: {} rows, worst relative error {worst:e}", reference.len());
}

/// A checkpoint written by transformers 5.17 itself (`save_pretrained`,
/// sharded where big enough) in `hf/NAME/new`, and the same tensors with the
/// config in the layout of transformers 4.x in `hf/NAME/old`: both must give
/// transformers' logits (see fixtures/README.md and make_fixtures.py).
fn check_transformers_checkpoint(name: &str) {
    for path in EnginePath::ALL {
        check_transformers_checkpoint_on(name, &Device::cpu(), path);
    }
}

fn check_transformers_checkpoint_on(name: &str, device: &Device, path: EnginePath) {
    let root = fixtures_dir().join("hf");
    let reference = npy::read_f32_2d(&root.join(format!("{name}.logits.npy"))).unwrap();
    let text = std::fs::read_to_string(root.join(format!("{name}.tokens.json"))).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = |key: &str| -> Vec<u32> {
        value[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect()
    };
    let (prompt, expected_tokens) = (ids("prompt"), ids("generated"));
    let mut configs = Vec::new();
    for layout in ["new", "old"] {
        let directory = root.join(name).join(layout);
        let mut model = Model::load(&directory, device, LoadOptions { quiet: true })
            .unwrap_or_else(|error| panic!("{name}/{layout}: {error}"));
        path.apply(&mut model);
        let generation = model
            .generate(&GenerationRequest {
                stop_at_eos: false,
                keep_logits: true,
                ..GenerationRequest::new(&prompt, expected_tokens.len())
            })
            .unwrap();
        assert_eq!(
            generation.generated, expected_tokens,
            "{name}/{layout}: greedy tokens differ"
        );
        let what = format!("{name}/{layout} on {} ({path:?} path)", device.name());
        assert_logits_close(&what, &generation.logits, &reference, path.tolerance());
        configs.push(model.config().clone());
    }
    assert_eq!(configs[0], configs[1], "{name}: the two layouts read differently");
}

#[test]
fn transformers5_llama3_scaling_sharded_matches_in_both_layouts() {
    exact_cpu_products();
    check_transformers_checkpoint("llama3");
}

#[test]
fn transformers5_qwen2_theta_1e6_with_biases_matches_in_both_layouts() {
    exact_cpu_products();
    check_transformers_checkpoint("qwen2");
}

#[test]
fn transformers5_mistral_tied_matches_in_both_layouts() {
    exact_cpu_products();
    check_transformers_checkpoint("mistral");
}

#[test]
fn transformers5_explicit_head_dim_and_linear_scaling_matches_in_both_layouts() {
    exact_cpu_products();
    check_transformers_checkpoint("llama-head-dim-linear");
}

#[test]
fn transformers5_attention_bias_matches_in_both_layouts() {
    exact_cpu_products();
    check_transformers_checkpoint("llama-attention-bias");
}

#[test]
fn transformers5_yarn_matches_in_both_layouts() {
    exact_cpu_products();
    check_transformers_checkpoint("llama-yarn");
}

#[test]
fn transformers5_qwen3_per_head_norms_match_in_both_layouts() {
    exact_cpu_products();
    check_transformers_checkpoint("qwen3");
}

#[test]
fn llama_with_gqa_and_tied_embeddings_matches_transformers() {
    exact_cpu_products();
    check_fixture(&FIXTURES[0]);
}

#[test]
fn qwen2_with_biases_matches_transformers() {
    exact_cpu_products();
    check_fixture(&FIXTURES[1]);
}

#[test]
fn llama3_rope_scaling_matches_transformers() {
    exact_cpu_products();
    check_fixture(&FIXTURES[2]);
}

/// The same checkpoints on the GPU, against transformers directly, to the
/// same bound as the CPU (measured worst on an H100: 5.7e-7).
#[test]
fn transformers5_checkpoints_match_on_the_gpu() {
    exact_cpu_products();
    let Some(device) = kernelscope::testing::Backend::Cuda.device(kernelscope::DeviceOptions::new()) else {
        return;
    };
    for name in [
        "llama3",
        "qwen2",
        "mistral",
        "llama-head-dim-linear",
        "llama-attention-bias",
        "llama-yarn",
        "qwen3",
    ] {
        for path in EnginePath::ALL {
            check_transformers_checkpoint_on(name, &device, path);
        }
    }
}

/// The in-memory preset (what `kscope run` uses with no files) is the same
/// model as the written checkpoint: identical logits.
#[test]
fn in_memory_preset_equals_written_checkpoint() {
    exact_cpu_products();
    let directory = std::env::temp_dir().join(format!("kscope-inmemory-{}", std::process::id()));
    let config = preset("tiny-qwen2").unwrap();
    synthetic::write_checkpoint(
        &config,
        &directory,
        SyntheticOptions {
            dtype: DType::F16,
            seed: 9,
            quiet: true,
        },
    )
    .unwrap();
    let device = Device::cpu();
    let mut loaded = Model::load(&directory, &device, LoadOptions { quiet: true }).unwrap();
    let mut generated = Model::from_preset(
        "tiny-qwen2",
        &device,
        SyntheticOptions {
            dtype: DType::F16,
            seed: 9,
            quiet: true,
        },
    )
    .unwrap();
    let prompt = [7, 300, 1999];
    let a = loaded
        .generate(&GenerationRequest {
            stop_at_eos: false,
            keep_logits: true,
            ..GenerationRequest::new(&prompt, 6)
        })
        .unwrap();
    let b = generated
        .generate(&GenerationRequest {
            stop_at_eos: false,
            keep_logits: true,
            ..GenerationRequest::new(&prompt, 6)
        })
        .unwrap();
    std::fs::remove_dir_all(&directory).unwrap();
    assert_eq!(a.generated, b.generated);
    assert_eq!(a.logits, b.logits);
}
