//! Mixture-of-experts GGUF files against transformers: a Qwen3-MoE
//! (`qwen3moe`) and a Mixtral (`llama` with experts, q/k rows permuted)
//! that transformers made, written by gguf-py in F16 and Q8_0 with the
//! experts stacked (`ffn_{gate,up,down}_exps`, router `ffn_gate_inp`), and
//! transformers' logits on the weights each file holds (gguf-py's own
//! dequantization). Made by `tools/reference/gguf_moe_fixtures.py`.
//!
//! The reference path (position by position, f32 cache, f32 activations
//! into the quantized products, the experts' too): the F16 files' experts
//! stay f16, the Q8_0 files' stay in their blocks (`ops::quantized::experts`),
//! and every product is f32, so the logits agree to f32 rounding (1e-5;
//! 6e-7 seen on the CPU). On CUDA the quantized products take 8-bit
//! activations, as llama.cpp's do. The prompt is then run again as one
//! prefill chunk, its experts grouped by expert, and its last row checked
//! the same way.

use std::path::Path;

use kernelscope::ops::quantized::linear::Activations;
use kernelscope::ops::sample::Sampling;
use kernelscope::profile::Phase;
use kernelscope::testing::Backend;
use kernelscope::{DType, DeviceOptions};
use kernelscope_model::gguf_model::GgufModel;
use kernelscope_model::{Architecture, LoadOptions, Model, npy};

mod common;

/// Q8_0 files on CUDA, whose quantized products take 8-bit activations:
/// the bound `gguf_model`'s CUDA tests hold them to.
const QUANTIZED_ACTIVATIONS_TOLERANCE: f32 = 5e-2;

/// The tokens of `tools/reference/gguf_moe_fixtures.py`.
const TOKENS: [u32; 10] = [1, 5, 9, 200, 33, 7, 100, 64, 250, 3];

fn moe_gguf_files_run_to_transformers_logits(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_moe");
    for (kind, architecture, experts, per_token) in [
        ("qwen3moe", Architecture::Qwen3Moe, 8, 2),
        ("mixtral", Architecture::Mixtral, 4, 2),
    ] {
        for (file_type, tolerance) in [("f16", 1e-5f32), ("q8_0", 1e-5)] {
            let name = format!("{kind}-{file_type}");
            let gguf = GgufModel::open(&folder.join(format!("{name}.gguf"))).unwrap();
            let config = &gguf.config;
            assert_eq!(config.architecture, architecture, "{name}");
            let moe = config.experts.as_ref().expect("a sparse file");
            assert_eq!((moe.count, moe.per_token), (experts, per_token), "{name}");
            assert!(moe.normalize_weights && moe.sparse_layers.iter().all(|&sparse| sparse));
            assert_eq!(config.qk_norm, architecture == Architecture::Qwen3Moe);
            let mut model =
                Model::load_gguf(&gguf, std::slice::from_ref(&device), LoadOptions { quiet: true }).unwrap();
            model.set_kv_dtype(DType::F32).unwrap();
            // The CPU multiplies quantized blocks with f32 activations too;
            // CUDA only with 8-bit ones (llama.cpp's q8_1), as it decodes.
            let tolerance = if backend == Backend::Cpu {
                model.set_quantized_activations(Activations::F32).unwrap();
                tolerance
            } else if file_type == "q8_0" {
                QUANTIZED_ACTIVATIONS_TOLERANCE
            } else {
                tolerance
            };
            let (found, routing) = run(&mut model);
            let expected = npy::read_f32_2d(&folder.join(format!("{name}.logits.npy"))).unwrap();
            // With 8-bit activations a near-tied router may pick another
            // expert than f32 math does (the CPU's 8-bit path does too: on
            // qwen3moe-q8_0 at rows 5 and 7, 0.17 and 0.26 off after each),
            // after which the logits are another computation's: rows are
            // compared up to the first whose experts differ from the CPU
            // reference path's (which matches transformers, above), and at
            // least three rows must get there.
            let rows = if backend == Backend::Cuda && file_type == "q8_0" {
                let mut reference =
                    Model::load_gguf(&gguf, &[kernelscope::Device::cpu()], LoadOptions { quiet: true })
                        .unwrap();
                reference.set_kv_dtype(DType::F32).unwrap();
                reference.set_quantized_activations(Activations::F32).unwrap();
                let (_, reference_routing) = run(&mut reference);
                // The same experts, in either order (two near-equal weights
                // may swap places and give the same sum).
                let chosen = |layers: &Vec<Vec<u32>>| -> Vec<Vec<u32>> {
                    layers
                        .iter()
                        .map(|layer| {
                            let mut sorted = layer.clone();
                            sorted.sort_unstable();
                            sorted
                        })
                        .collect()
                };
                let same = routing
                    .iter()
                    .zip(&reference_routing)
                    .take_while(|(ours, theirs)| chosen(ours) == chosen(theirs))
                    .count();
                eprintln!(
                    "{name} on {}: the experts f32 math chooses for {same} of {} rows",
                    device.name(),
                    TOKENS.len()
                );
                assert!(same >= 3, "{name}: routing differs from row {same}");
                same
            } else {
                TOKENS.len()
            };
            let error = common::worst_relative_error(&found[..rows], &expected[..rows]);
            eprintln!(
                "{name} on {}: worst relative error against transformers {error:e}",
                device.name()
            );
            assert!(error <= tolerance, "{name}: relative error {error:e}");
            // The prompt as one prefill chunk: the experts grouped into runs
            // by expert (quantized runs through the quantized products),
            // the last row's logits as transformers' where every row routed
            // as f32 math does.
            if rows == TOKENS.len() {
                model.prefill(&TOKENS, 0).unwrap();
                let last = model.logits().unwrap();
                let error = common::worst_relative_error(&[last], &expected[TOKENS.len() - 1..]);
                eprintln!(
                    "{name} on {}: prefill's last row against transformers {error:e}",
                    device.name()
                );
                assert!(error <= tolerance, "{name} prefill: relative error {error:e}");
            }
        }
    }
}

/// Runs `TOKENS` position by position: every row's logits and routing.
fn run(model: &mut Model) -> (Vec<Vec<f32>>, Vec<Vec<Vec<u32>>>) {
    TOKENS
        .iter()
        .enumerate()
        .map(|(position, &token)| {
            model
                .step(token, position, Phase::Prefill, Sampling::GREEDY, 0.0)
                .unwrap();
            (model.logits().unwrap(), model.routing().unwrap().unwrap())
        })
        .unzip()
}

kernelscope::device_tests!(moe_gguf_files_run_to_transformers_logits);
