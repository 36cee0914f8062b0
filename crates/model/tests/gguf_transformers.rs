//! Parity with transformers on GGUF files: a Llama (its q/k rows permuted
//! as llama.cpp's converter writes them) and a Qwen2 (biases, NEOX RoPE)
//! that transformers made, written by gguf-py in F16, Q8_0 and Q4_0
//! (gguf-py's quantizers), and transformers' logits on the same files,
//! loaded with `from_pretrained(..., gguf_file=...)` (which dequantizes to
//! f32). Made by `tools/reference/gguf_transformers_fixtures.py`
//! (transformers 5 with PyTorch, on the GPU machine).
//!
//! kscope runs the reference path here (one position at a time, f32 KV
//! cache, f32 activations into the quantized products): f16 weights are widened, quantized ones multiplied in their
//! blocks, everything in f32 as transformers computes, so the logits agree
//! to f32 rounding: within 1e-5 of the row's largest logit (1.1e-6 the
//! worst seen). The files' F32 norms do not fit f16 exactly, so the F16
//! files run in f32 rather than round them.

use std::path::Path;

use kernelscope::Device;
use kernelscope::ops::quantized::linear::Activations;
use kernelscope::ops::sample::Sampling;
use kernelscope::profile::Phase;
use kernelscope_model::gguf_model::GgufModel;
use kernelscope_model::{LoadOptions, Model, npy};

mod common;

const TOLERANCE: f32 = 1e-5;

#[test]
fn gguf_files_run_to_transformers_logits() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_transformers");
    let tokens: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("tokens.json")).unwrap()).unwrap();
    let tokens: Vec<u32> = tokens["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_u64().unwrap() as u32)
        .collect();
    for architecture in ["llama", "qwen2"] {
        for file_type in ["f16", "q8_0", "q4_0"] {
            let name = format!("{architecture}-{file_type}");
            let gguf = GgufModel::open(&folder.join(format!("{name}.gguf"))).unwrap();
            let mut model = Model::load_gguf(&gguf, &[Device::cpu()], LoadOptions { quiet: true }).unwrap();
            model.set_kv_dtype(kernelscope::DType::F32).unwrap();
            model.set_quantized_activations(Activations::F32).unwrap();
            let found: Vec<Vec<f32>> = tokens
                .iter()
                .enumerate()
                .map(|(position, &token)| {
                    model
                        .step(token, position, Phase::Prefill, Sampling::GREEDY, 0.0)
                        .unwrap();
                    model.logits().unwrap()
                })
                .collect();
            let expected = npy::read_f32_2d(&folder.join(format!("{name}.logits.npy"))).unwrap();
            let error = common::worst_relative_error(&found, &expected);
            eprintln!("{name}: worst relative error against transformers {error:e}");
            assert!(error <= TOLERANCE, "{name}: relative error {error:e}");
        }
    }
}
