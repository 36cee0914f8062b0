//! Parity with llama.cpp on GGUF files kscope writes: `gen-model --preset
//! tiny-256 --seed 5 --quant TYPE` (whole K-quant blocks) for Q4_K_M, Q6_K
//! and Q8_0, against libllama's logits of every position of one prompt on
//! the same file, and on its twin dequantized to F32 by gguf-py
//! (`tools/reference/gguf_llamacpp_fixtures.py`). The twin shows that both
//! read the same weights (kscope's block products within 0.2 % of
//! llama.cpp's dense f32 run); the quantized run shows how far llama.cpp's
//! own arithmetic (activations quantized to 8 bits for its integer dot
//! products, an f16 KV cache) lands from kscope's f32 arithmetic over the
//! blocks: a few percent on these random weights, with the same top token
//! at nearly every position.

use std::path::Path;

use kernelscope::Device;
use kernelscope::ops::quantized::linear::Activations;
use kernelscope::ops::sample::Sampling;
use kernelscope::profile::Phase;
use kernelscope_model::gguf_export::{GgufFileType, write_gguf};
use kernelscope_model::gguf_model::GgufModel;
use kernelscope_model::synthetic::{file_digest, tensor_values};
use kernelscope_model::{LoadOptions, Model, npy, preset};

/// Root-mean-square difference over the root-mean-square of `reference`.
fn relative_rms(reference: &[Vec<f32>], found: &[Vec<f32>]) -> f64 {
    let (mut difference, mut size) = (0.0f64, 0.0f64);
    for (a, b) in reference.iter().flatten().zip(found.iter().flatten()) {
        difference += f64::from(a - b).powi(2);
        size += f64::from(*a).powi(2);
    }
    (difference / size).sqrt()
}

fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .fold(
            (0, f32::MIN),
            |best, (index, &value)| if value > best.1 { (index, value) } else { best },
        )
        .0
}

fn top_one_agreement(reference: &[Vec<f32>], found: &[Vec<f32>]) -> usize {
    reference
        .iter()
        .zip(found)
        .filter(|(a, b)| argmax(a) == argmax(b))
        .count()
}

#[test]
fn gen_model_ggufs_run_as_llama_cpp_runs_them() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_llamacpp");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("fixtures.json")).unwrap()).unwrap();
    let prompt: Vec<u32> = record["prompt"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_u64().unwrap() as u32)
        .collect();
    let seed = record["seed"].as_u64().unwrap();
    let config = preset("tiny-256").unwrap();
    let folder = std::env::temp_dir().join(format!("kscope-gguf-llamacpp-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    // (type, bound over the dequantized twin, bound over llama.cpp's own
    // quantized run, least top-1 agreements of the 8 positions)
    for (name, file_type, twin_bound, quantized_bound, least_agreement) in [
        ("q4_k_m", GgufFileType::Q4_K_M, 2e-3, 0.06, 7),
        ("q6_k", GgufFileType::Q6_K, 2e-3, 0.06, 6),
        ("q8_0", GgufFileType::Q8_0, 2e-3, 0.04, 7),
    ] {
        let path = folder.join(format!("{name}.gguf"));
        write_gguf(
            &config,
            &path,
            file_type,
            &format!("tiny-256 (synthetic, seed {seed})"),
            true,
            true,
            |tensor, shape| Ok(tensor_values(tensor, shape, seed)),
        )
        .unwrap();
        assert_eq!(
            format!("{:016x}", file_digest(&path).unwrap()),
            record["digests"][name].as_str().unwrap(),
            "{name}: the file differs from the one llama.cpp ran; rerun tools/reference/gguf_llamacpp_fixtures.py"
        );
        let gguf = GgufModel::open(&path).unwrap();
        let run = |activations| -> Vec<Vec<f32>> {
            let mut model = Model::load_gguf(&gguf, &[Device::cpu()], LoadOptions { quiet: true }).unwrap();
            model.set_quantized_activations(activations).unwrap();
            prompt
                .iter()
                .enumerate()
                .map(|(position, &token)| {
                    model
                        .step(token, position, Phase::Prefill, Sampling::GREEDY, 0.0)
                        .unwrap();
                    model.logits().unwrap()
                })
                .collect()
        };
        let found = run(Activations::F32);
        let int8 = run(Activations::Int8);
        let twin = npy::read_f32_2d(&fixtures.join(format!("{name}.twin.npy"))).unwrap();
        let quantized = npy::read_f32_2d(&fixtures.join(format!("{name}.llama.npy"))).unwrap();
        let (twin_error, quantized_error) = (relative_rms(&twin, &found), relative_rms(&quantized, &found));
        let agreement = top_one_agreement(&quantized, &found);
        eprintln!(
            "{name}: relative RMS error {twin_error:.2e} against llama.cpp on the F32 twin, {quantized_error:.2e} against its own {name} run; top-1 agrees at {agreement} of {} positions",
            prompt.len()
        );
        assert!(
            twin_error < twin_bound,
            "{name}: {twin_error} from the dequantized twin"
        );
        assert_eq!(
            top_one_agreement(&twin, &found),
            prompt.len(),
            "{name}: top-1 against the twin"
        );
        assert!(
            quantized_error < quantized_bound,
            "{name}: {quantized_error} from llama.cpp's run"
        );
        assert!(
            agreement >= least_agreement,
            "{name}: top-1 agrees at {agreement} positions"
        );
        // With activations in 8-bit blocks, as llama.cpp takes them.
        let int8_error = relative_rms(&quantized, &int8);
        let int8_twin = relative_rms(&twin, &int8);
        eprintln!(
            "{name}: with 8-bit activations, relative RMS error {int8_error:.2e} against llama.cpp's {name} run, {int8_twin:.2e} against the F32 twin"
        );
    }
    std::fs::remove_dir_all(&folder).unwrap();
}
