//! The engine's CPU logits, bit for bit, against a record kept in
//! `fixtures/engine_logits.json`: every fixture architecture, every path
//! through the forward pass (token by token and batched prefill, fused and
//! unfused decode, f32 and narrow KV caches, several chunks, split over two
//! ranks, sampled), each run's logits hashed by their f32 bits. A change to
//! how the model math is written must leave these alone; a change to the
//! math itself shows here first, and the record is rewritten on purpose
//! with `KSCOPE_BLESS_ENGINE_LOGITS=1` (say why in the commit).
//!
//! The CPU kernels round differently with and without FMA, so the record
//! names the kernel path it was made on; a machine on another path checks
//! every run against the f32 reference path within the parity tolerance
//! instead, and says so.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kernelscope::DType;
use kernelscope::Device;
use kernelscope::ops::sample::Sampling;
use kernelscope_model::{GenerationRequest, Model, SyntheticOptions};

mod common;
use common::worst_relative_error;

const RECORD: &str = "tests/fixtures/engine_logits.json";
const BLESS: &str = "KSCOPE_BLESS_ENGINE_LOGITS";

/// The CPU kernel path: the mat-vec and GEMM use fused multiply-adds where
/// the CPU has AVX2 and FMA, and bf16 mat-vecs and GEMMs `vdpbf16ps` where
/// it has AVX-512 BF16 (`cpu_simd::dot`, `ops::matmul`); each rounds
/// differently.
fn cpu_kernel_path() -> String {
    use kernelscope::cpu_simd::dot::{DotPath, dot_path};
    match dot_path() {
        DotPath::Portable => "portable".to_string(),
        DotPath::Avx2Fma => "x86_64 avx2+fma".to_string(),
        DotPath::Avx512Bf16Exact => "x86_64 avx2+fma mat-vecs (exact), avx512-bf16 gemm".to_string(),
        DotPath::Avx512Bf16 => "x86_64 avx2+fma, avx512-bf16 mat-vecs (x in two parts) and gemm".to_string(),
    }
}

/// One way through the engine.
#[derive(Clone, Copy, Debug)]
struct Path {
    name: &'static str,
    ranks: usize,
    prefill_chunk: usize,
    /// The KV cache in f32 (the reference) rather than the weights' dtype.
    f32_cache: bool,
    fusion: bool,
    /// Sampled at this temperature rather than greedy.
    temperature: f32,
    /// Every position's logits read back (batched prefill then computes
    /// every row's), or only the last step's.
    keep_logits: bool,
}

const PATHS: [Path; 10] = [
    Path {
        name: "reference",
        ranks: 1,
        prefill_chunk: 1,
        f32_cache: true,
        fusion: true,
        temperature: 0.0,
        keep_logits: true,
    },
    Path {
        name: "reference-unfused",
        ranks: 1,
        prefill_chunk: 1,
        f32_cache: true,
        fusion: false,
        temperature: 0.0,
        keep_logits: true,
    },
    Path {
        name: "default",
        ranks: 1,
        prefill_chunk: 2048,
        f32_cache: false,
        fusion: true,
        temperature: 0.0,
        keep_logits: true,
    },
    Path {
        name: "default-unfused",
        ranks: 1,
        prefill_chunk: 2048,
        f32_cache: false,
        fusion: false,
        temperature: 0.0,
        keep_logits: true,
    },
    Path {
        name: "chunks-of-3",
        ranks: 1,
        prefill_chunk: 3,
        f32_cache: false,
        fusion: true,
        temperature: 0.0,
        keep_logits: true,
    },
    Path {
        name: "last-logits-only",
        ranks: 1,
        prefill_chunk: 4,
        f32_cache: false,
        fusion: true,
        temperature: 0.0,
        keep_logits: false,
    },
    Path {
        name: "sampled",
        ranks: 1,
        prefill_chunk: 2048,
        f32_cache: false,
        fusion: true,
        temperature: 0.8,
        keep_logits: true,
    },
    Path {
        name: "split-2",
        ranks: 2,
        prefill_chunk: 2048,
        f32_cache: false,
        fusion: true,
        temperature: 0.0,
        keep_logits: true,
    },
    Path {
        name: "split-2-reference-unfused",
        ranks: 2,
        prefill_chunk: 1,
        f32_cache: true,
        fusion: false,
        temperature: 0.0,
        keep_logits: true,
    },
    Path {
        name: "split-2-chunks-of-3",
        ranks: 2,
        prefill_chunk: 3,
        f32_cache: false,
        fusion: true,
        temperature: 0.0,
        keep_logits: false,
    },
];

/// Fixture architectures and weight dtypes (a preset, its seed, a dtype).
const MODELS: [(&str, u64, DType); 5] = [
    ("tiny", 1, DType::BF16),
    ("tiny", 4, DType::F32),
    ("tiny", 5, DType::F16),
    ("tiny-qwen2", 2, DType::BF16),
    ("tiny-llama3", 3, DType::BF16),
];

/// What one run gave: its tokens, and its logits (every position's, or the
/// last step's).
struct Outcome {
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

fn run(preset: &str, seed: u64, dtype: DType, path: Path) -> Outcome {
    let options = SyntheticOptions {
        dtype,
        seed,
        quiet: true,
    };
    let devices: Vec<Device> = (0..path.ranks).map(|_| Device::cpu()).collect();
    let mut model = Model::from_preset_split(preset, &devices, options).unwrap();
    model.set_prefill_chunk(path.prefill_chunk).unwrap();
    if path.f32_cache {
        model.set_kv_dtype(DType::F32).unwrap();
    }
    model.set_fusion(path.fusion);
    let vocab = model.config().vocab_size as u64;
    let mut rng = kernelscope::rng::SplitMix64::new(seed ^ 0x5eed);
    let prompt: Vec<u32> = (0..11).map(|_| rng.below(vocab) as u32).collect();
    let generation = model
        .generate(&GenerationRequest {
            stop_at_eos: false,
            keep_logits: path.keep_logits,
            sampling: Sampling {
                temperature: path.temperature,
                top_p: 0.9,
            },
            seed: seed + 100,
            ..GenerationRequest::new(&prompt, 6)
        })
        .unwrap();
    let logits = if path.keep_logits {
        generation.logits
    } else {
        vec![model.logits().unwrap()]
    };
    Outcome {
        tokens: generation.generated,
        logits,
    }
}

/// FNV-1a over the tokens and every logit's bits.
fn digest(outcome: &Outcome) -> String {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut eat = |word: u32| {
        for byte in word.to_le_bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    outcome.tokens.iter().for_each(|&token| eat(token));
    outcome
        .logits
        .iter()
        .flatten()
        .for_each(|logit| eat(logit.to_bits()));
    format!("{hash:016x}")
}

fn record_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(RECORD)
}

#[test]
fn every_path_gives_the_recorded_logits_bit_for_bit() {
    let mut digests = BTreeMap::new();
    let mut outcomes = BTreeMap::new();
    for (preset, seed, dtype) in MODELS {
        for path in PATHS {
            let key = format!("{preset}/{dtype}/seed-{seed}/{}", path.name);
            let outcome = run(preset, seed, dtype, path);
            assert!(
                outcome.logits.iter().flatten().all(|logit| logit.is_finite()),
                "{key}: a logit is not finite"
            );
            digests.insert(key.clone(), digest(&outcome));
            outcomes.insert(key, outcome);
        }
    }
    let kernel_path = cpu_kernel_path();
    let kernel_path = kernel_path.as_str();
    if std::env::var_os(BLESS).is_some() {
        let record = serde_json::json!({ "cpu_kernel_path": kernel_path, "runs": digests });
        std::fs::write(
            record_path(),
            serde_json::to_string_pretty(&record).unwrap() + "\n",
        )
        .unwrap();
        eprintln!("{BLESS}: wrote {} digests to {RECORD}", digests.len());
        return;
    }
    let text = std::fs::read_to_string(record_path())
        .unwrap_or_else(|error| panic!("{RECORD}: {error}; write it with {BLESS}=1"));
    let record: serde_json::Value = serde_json::from_str(&text).unwrap();
    let recorded: BTreeMap<String, String> = serde_json::from_value(record["runs"].clone()).unwrap();
    assert_eq!(
        recorded.keys().collect::<Vec<_>>(),
        digests.keys().collect::<Vec<_>>(),
        "the record lists other runs than this test makes"
    );
    if record["cpu_kernel_path"] == kernel_path {
        let differing: Vec<&String> = digests
            .iter()
            .filter(|(key, digest)| recorded[*key] != **digest)
            .map(|(key, _)| key)
            .collect();
        assert!(
            differing.is_empty(),
            "logits changed on {} of {} runs: {differing:#?}",
            differing.len(),
            digests.len()
        );
    } else {
        eprintln!(
            "NOT BIT FOR BIT: {RECORD} was made on the `{}` CPU kernel path and this machine takes `{kernel_path}`; \
             checking every run against the f32 reference path within 2e-2 instead",
            record["cpu_kernel_path"]
        );
        for (key, outcome) in &outcomes {
            let (model, _) = key.rsplit_once('/').unwrap();
            let reference = &outcomes[&format!("{model}/reference")];
            // Runs that chose other tokens (sampled) or kept only the last
            // logits have no rows to match.
            if outcome.tokens == reference.tokens && outcome.logits.len() == reference.logits.len() {
                let error = worst_relative_error(&outcome.logits, &reference.logits);
                assert!(error <= 2e-2, "{key}: worst relative error {error:e}");
            }
        }
    }
}
