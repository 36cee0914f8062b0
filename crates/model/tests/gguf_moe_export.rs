//! Mixture-of-experts models written as GGUF files by `gguf_export` (the
//! `qwen3moe` architecture, Mixtral as a `llama` with experts; stacked
//! `ffn_{gate,up,down}_exps`, the router in F32) and read back on the CPU:
//! an F32 file of a preset runs to the preset's own logits and routing;
//! quantized files keep their experts in blocks, run near the dense
//! logits, and hold the types llama-quantize gives (Q4_K_M's Q6_K down
//! projections in the layers it favours, Mixtral's Q8_0 attention K/V); a
//! prompt prefilled as one chunk (experts grouped by expert) agrees with
//! the same prompt stepped; `kscope quantize` of transformers' per-expert
//! Mixtral checkpoint runs to transformers' logits; what llama.cpp cannot
//! express is refused by name.

use std::path::{Path, PathBuf};

use kernelscope::ops::WeightFormat;
use kernelscope::ops::quantized::linear::Activations;
use kernelscope::ops::sample::Sampling;
use kernelscope::profile::Phase;
use kernelscope::quant::QuantFormat;
use kernelscope::{DType, Device};
use kernelscope_model::gguf_export::{GgufFileType, quantize_checkpoint, write_gguf};
use kernelscope_model::gguf_model::{GgufModel, gguf_names};
use kernelscope_model::synthetic::{tensor_values, write_checkpoint};
use kernelscope_model::{
    Config, FeedForward, GenerationRequest, LoadOptions, Model, SyntheticOptions, npy, preset,
};

const SEED: u64 = 5;
const TOKENS: [u32; 6] = [7, 300, 5, 199, 42, 64];

/// Every position's logits and every sparse layer's choice, one at a time.
fn stepped(model: &mut Model) -> (Vec<Vec<f32>>, Vec<Vec<Vec<u32>>>) {
    TOKENS
        .iter()
        .enumerate()
        .map(|(position, &token)| {
            model
                .step(token, position, Phase::Decode, Sampling::GREEDY, 0.0)
                .unwrap();
            (model.logits().unwrap(), model.routing().unwrap().unwrap())
        })
        .unzip()
}

fn folder(what: &str) -> PathBuf {
    let folder = std::env::temp_dir().join(format!("kscope-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    folder
}

/// Preset `name` with experts in every layer (tiny-qwen3-moe keeps layer 0
/// dense, which llama.cpp's `qwen3moe` cannot express).
fn config_of(name: &str) -> Config {
    let mut config = preset(name).unwrap();
    let experts = config.experts.as_mut().unwrap();
    experts.sparse_layers = vec![true; experts.sparse_layers.len()];
    config
}

fn written(name: &str, file_type: GgufFileType, folder: &Path) -> PathBuf {
    let config = config_of(name);
    let path = folder.join(format!("{name}-{file_type:?}.gguf"));
    write_gguf(&config, &path, file_type, name, true, true, |tensor, shape| {
        Ok(tensor_values(tensor, shape, SEED))
    })
    .unwrap();
    path
}

/// The largest difference of any logit over the logits' spread.
fn relative_difference(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    let values: Vec<f32> = a.iter().flatten().copied().collect();
    let mean = values.iter().sum::<f32>() / values.len() as f32;
    let spread = (values.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / values.len() as f32).sqrt();
    let largest = a
        .iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    largest / spread
}

/// Each layer's chosen experts in order of id.
fn sorted(layers: &[Vec<u32>]) -> Vec<Vec<u32>> {
    layers
        .iter()
        .map(|layer| {
            let mut chosen = layer.clone();
            chosen.sort_unstable();
            chosen
        })
        .collect()
}

fn load(path: &Path) -> Model {
    let gguf = GgufModel::open(path).unwrap();
    Model::load_gguf(&gguf, &[Device::cpu()], LoadOptions { quiet: true }).unwrap()
}

/// Each sparse layer's (gate/up, down) formats.
fn expert_formats(model: &Model) -> Vec<(WeightFormat, WeightFormat)> {
    model
        .weights()
        .layers
        .iter()
        .filter_map(|layer| match &layer.feed_forward {
            FeedForward::Experts(experts) => Some((experts.format, experts.down_format)),
            FeedForward::Dense { .. } => None,
        })
        .collect()
}

#[test]
fn f32_moe_ggufs_run_to_the_presets_logits_and_routing() {
    let folder = folder("gguf-moe-f32");
    for name in ["tiny-qwen3-moe", "tiny-mixtral"] {
        let options = SyntheticOptions {
            dtype: DType::F32,
            seed: SEED,
            quiet: true,
        };
        let checkpoint = folder.join(name);
        write_checkpoint(&config_of(name), &checkpoint, options).unwrap();
        let mut reference = Model::load(&checkpoint, &Device::cpu(), LoadOptions { quiet: true }).unwrap();
        let (expected, expected_routing) = stepped(&mut reference);
        let path = written(name, GgufFileType::F32, &folder);
        let gguf = GgufModel::open(&path).unwrap();
        assert_eq!(
            gguf.config.architecture,
            reference.config().architecture,
            "{name}"
        );
        assert_eq!(
            gguf.config.experts,
            reference.config().experts,
            "{name}: the experts read back"
        );
        let mut model = load(&path);
        let (found, routing) = stepped(&mut model);
        assert_eq!(routing, expected_routing, "{name}: routing");
        let difference = relative_difference(&expected, &found);
        assert!(
            difference <= 1e-5,
            "{name}: logits differ by {difference} of their spread"
        );
    }
    std::fs::remove_dir_all(&folder).unwrap();
}

/// An F32 file holding what `quantized`'s tensors dequantize to: each row
/// of the preset's values quantized as the file stores it and back (rows
/// are quantized one by one, so the file's row order does not matter).
fn dequantized_twin(name: &str, quantized: &GgufModel, path: &Path) {
    let config = config_of(name);
    let names = gguf_names(&config);
    write_gguf(
        &config,
        path,
        GgufFileType::F32,
        name,
        true,
        true,
        |tensor, shape| {
            let mut values = tensor_values(tensor, shape, SEED);
            let (_, stored) = names.iter().find(|(name, _)| name == tensor).unwrap();
            let stored = quantized.file.tensor(stored).unwrap().tensor_type();
            if let Some(WeightFormat::Quantized(format)) = stored.format() {
                let columns = *shape.last().unwrap();
                let mut blocks = vec![0u8; format.row_bytes(columns).unwrap()];
                for row in values.chunks_mut(columns) {
                    format.quantize_row(row, &mut blocks).unwrap();
                    format.dequantize_row(&blocks, row).unwrap();
                }
            }
            Ok(values)
        },
    )
    .unwrap();
}

#[test]
fn quantized_moe_ggufs_keep_their_experts_in_blocks() {
    let folder = folder("gguf-moe-quantized");
    let mut int8_rows = 0;
    for name in ["tiny-qwen3-moe", "tiny-mixtral"] {
        for file_type in [GgufFileType::Q8_0, GgufFileType::Q4_K_M] {
            let path = written(name, file_type, &folder);
            let gguf = GgufModel::open(&path).unwrap();
            let type_of = |tensor: &str| gguf.file.tensor(tensor).unwrap().tensor_type().to_string();
            assert_eq!(type_of("blk.0.ffn_gate_inp.weight"), "F32", "{name}: router");
            if name == "tiny-mixtral" && file_type == GgufFileType::Q4_K_M {
                assert_eq!(type_of("blk.0.attn_k.weight"), "Q8_0", "eight experts' K");
                assert_eq!(type_of("blk.0.attn_v.weight"), "Q8_0", "eight experts' V");
            }
            let twin = folder.join(format!("{name}-{file_type:?}-dequantized.gguf"));
            dequantized_twin(name, &gguf, &twin);
            let mut dense = load(&twin);
            let (expected, expected_routing) = stepped(&mut dense);
            let mut model = load(&path);
            let formats = expert_formats(&model);
            assert!(!formats.is_empty(), "{name}: no sparse layer");
            for (gate_up, down) in &formats {
                assert!(
                    matches!(gate_up, WeightFormat::Quantized(_))
                        && matches!(down, WeightFormat::Quantized(_)),
                    "{name} {file_type:?}: experts in {gate_up} and {down}"
                );
            }
            let columns = model.config().experts.as_ref().unwrap().intermediate_size;
            if file_type == GgufFileType::Q4_K_M {
                // llama-quantize's Q4_K_M: down in Q6_K in the layers it
                // favours (Q8_0 where rows are not whole K-blocks, as the
                // tiny presets' are), elsewhere as gate and up (Q4_K or its
                // Q5_0). Every layer is sparse here, so layer = index.
                let layers = formats.len();
                let more_bits = |layer: usize| {
                    layer < layers / 8
                        || layer >= 7 * layers / 8
                        || (layer as isize - (layers / 8) as isize).rem_euclid(3) == 2
                };
                let favoured = if columns.is_multiple_of(256) {
                    QuantFormat::Q6_K
                } else {
                    QuantFormat::Q8_0
                };
                for (layer, (gate_up, down)) in formats.iter().enumerate() {
                    let wanted = if more_bits(layer) {
                        WeightFormat::Quantized(favoured)
                    } else {
                        *gate_up
                    };
                    assert_eq!(*down, wanted, "{name}: layer {layer}'s down");
                }
                assert!(
                    formats.iter().any(|(gate_up, down)| gate_up != down),
                    "{name}: no down in a format of its own"
                );
            }
            // f32 activations: the blocks' own values, so the dense twin's
            // routing and logits to f32 rounding. 8-bit activations (as
            // llama.cpp): rows up to the first whose experts differ (a
            // near-tied router may choose otherwise), at llama.cpp's error.
            for (activations, bound) in [(Activations::F32, 1e-5), (Activations::Int8, 0.1)] {
                model.set_quantized_activations(activations).unwrap();
                let (found, routing) = stepped(&mut model);
                let same = routing
                    .iter()
                    .zip(&expected_routing)
                    .take_while(|(ours, theirs)| sorted(ours) == sorted(theirs))
                    .count();
                let difference = relative_difference(&expected[..same], &found[..same]);
                eprintln!(
                    "{name} {file_type:?} {activations:?}: {same} rows route alike, {difference} of the spread"
                );
                if activations == Activations::F32 {
                    assert_eq!(
                        same,
                        TOKENS.len(),
                        "{name} {file_type:?}: routing differs from row {same}"
                    );
                } else {
                    int8_rows += same;
                }
                assert!(
                    same == 0 || difference <= bound,
                    "{name} {file_type:?} {activations:?}: {difference}"
                );
                assert!(
                    found.iter().flatten().all(|logit| logit.is_finite()),
                    "{name} {file_type:?}: a logit is not finite"
                );
                if activations == Activations::F32 {
                    // The prompt as one chunk: grouped experts through the
                    // quantized products, the last row as the steps gave it.
                    model.prefill(&TOKENS, 0).unwrap();
                    let last = model.logits().unwrap();
                    let difference = relative_difference(&found[TOKENS.len() - 1..], &[last]);
                    assert!(difference <= bound, "{name} {file_type:?} prefill: {difference}");
                }
            }
        }
    }
    assert!(
        int8_rows >= TOKENS.len(),
        "only {int8_rows} rows routed alike with 8-bit activations"
    );
    std::fs::remove_dir_all(&folder).unwrap();
}

#[test]
fn a_quantized_transformers_mixtral_runs_to_transformers_logits() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf");
    let folder = folder("gguf-moe-quantize");
    let path = folder.join("mixtral.gguf");
    // Per-expert tensors as transformers writes them, gathered and stacked.
    quantize_checkpoint(&root.join("mixtral/f32"), &path, GgufFileType::F32, true).unwrap();
    let mut model = load(&path);
    model.set_prefill_chunk(1).unwrap();
    model.set_kv_dtype(DType::F32).unwrap();
    let tokens: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("mixtral.f32.tokens.json")).unwrap())
            .unwrap();
    let ids = |key: &str| -> Vec<u32> {
        tokens[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_u64().unwrap() as u32)
            .collect()
    };
    let (prompt, generated) = (ids("prompt"), ids("generated"));
    let expected = npy::read_f32_2d(&root.join("mixtral.f32.logits.npy")).unwrap();
    let generation = model
        .generate(&GenerationRequest {
            stop_at_eos: false,
            keep_logits: true,
            ..GenerationRequest::new(&prompt, generated.len())
        })
        .unwrap();
    assert_eq!(generation.generated, generated, "greedy tokens");
    for (row, (ours, theirs)) in generation.logits.iter().zip(&expected).enumerate() {
        let scale = theirs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let error = ours
            .iter()
            .zip(theirs)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(error <= 1e-5 * scale, "row {row}: {error} of {scale}");
    }
    // A Qwen3-MoE with weights not renormalised (and dense layers among its
    // sparse ones) has no form llama.cpp reads: refused, naming why.
    let error = quantize_checkpoint(
        &root.join("qwen3-moe/f32"),
        &folder.join("qwen3-moe.gguf"),
        GgufFileType::Q8_0,
        true,
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("norm_topk_prob"), "{error}");
    let path = folder.join("dense-layer.gguf");
    let error = write_gguf(
        &preset("tiny-qwen3-moe").unwrap(),
        &path,
        GgufFileType::F32,
        "x",
        true,
        true,
        |tensor, shape| Ok(tensor_values(tensor, shape, SEED)),
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("layer 0") && error.contains("mlp_only_layers"),
        "{error}"
    );
    std::fs::remove_dir_all(&folder).unwrap();
}

#[test]
fn sparse_ggufs_split_their_experts_over_ranks() {
    let folder = folder("gguf-moe-split");
    let devices = [Device::cpu(), Device::cpu()];
    for (name, file_type) in [
        ("tiny-mixtral", GgufFileType::F32),
        ("tiny-qwen3-moe", GgufFileType::Q8_0),
    ] {
        let gguf = GgufModel::open(&written(name, file_type, &folder)).unwrap();
        let mut unsplit = Model::load_gguf(&gguf, &[Device::cpu()], LoadOptions { quiet: true }).unwrap();
        let mut split = Model::load_gguf(&gguf, &devices, LoadOptions { quiet: true }).unwrap();
        for model in [&mut unsplit, &mut split] {
            model.set_quantized_activations(Activations::F32).unwrap();
        }
        let (expected, expected_routing) = stepped(&mut unsplit);
        let (found, routing) = stepped(&mut split);
        assert_eq!(routing, expected_routing, "{name} {file_type:?}: routing");
        let difference = relative_difference(&expected, &found);
        assert!(
            difference <= 1e-5,
            "{name} {file_type:?}: split logits differ by {difference}"
        );
    }
    // Two ranks would cut tiny-mixtral's Q8_0 down projections (rows of 160)
    // inside a block of 32: refused, naming the tensor.
    let gguf = GgufModel::open(&written("tiny-mixtral", GgufFileType::Q8_0, &folder)).unwrap();
    let error = Model::load_gguf(&gguf, &devices, LoadOptions { quiet: true })
        .err()
        .expect("a split inside a block")
        .to_string();
    assert!(
        error.contains("ffn_down_exps") && error.contains("cut"),
        "{error}"
    );
    std::fs::remove_dir_all(&folder).unwrap();
}
