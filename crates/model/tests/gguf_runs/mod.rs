//! What the GGUF model tests share (gguf_model.rs, gguf_decode_kernels.rs):
//! files of a preset written by `gguf_export`, the models loaded from
//! them, a fixed run's logits, and how close two runs must be.

use kernelscope::Device;
use kernelscope::ops::quantized::linear::Activations;
use kernelscope::ops::sample::Sampling;
use kernelscope::profile::Phase;
use kernelscope_model::gguf_export::{GgufFileType, write_gguf};
use kernelscope_model::gguf_model::GgufModel;
use kernelscope_model::synthetic::tensor_values;
use kernelscope_model::{LoadOptions, Model, preset};

/// The weights' seed of every file written here.
pub const SEED: u64 = 11;
/// The tokens `logits` decodes, one position each.
const TOKENS: [u32; 5] = [7, 300, 5, 1999, 42];

/// The logits of each of [`TOKENS`] decoded at its position.
pub fn logits(model: &mut Model) -> Vec<Vec<f32>> {
    TOKENS
        .iter()
        .enumerate()
        .map(|(position, &token)| {
            model
                .step(token, position, Phase::Decode, Sampling::GREEDY, 0.0)
                .unwrap();
            model.logits().unwrap()
        })
        .collect()
}

/// The preset `name` written as a GGUF file of `file_type` into `folder`.
pub fn written(name: &str, file_type: GgufFileType, folder: &std::path::Path) -> std::path::PathBuf {
    let config = preset(name).unwrap();
    let path = folder.join(format!("{name}-{file_type:?}.gguf"));
    write_gguf(&config, &path, file_type, name, true, true, |tensor, shape| {
        Ok(tensor_values(tensor, shape, SEED))
    })
    .unwrap();
    path
}

/// `gguf` loaded on `device`.
pub fn loaded(gguf: &GgufModel, device: &Device) -> Model {
    Model::load_gguf(gguf, std::slice::from_ref(device), LoadOptions { quiet: true }).unwrap()
}

/// `gguf` on the CPU with f32 activations into its products: the
/// reference the GPU's quantized products are measured against.
pub fn cpu_in_f32(gguf: &GgufModel) -> Model {
    let mut cpu = loaded(gguf, &Device::cpu());
    cpu.set_quantized_activations(Activations::F32).unwrap();
    cpu
}

/// Relative error allowed between a GPU run of a quantized file (its
/// blocks multiplied in place with x quantized to 8-bit blocks of 32) and
/// the CPU's products of the same blocks with f32 activations: max |a - b|
/// over a row over the row's largest |logit|. The 8-bit activations are
/// off by up to half a step (1/254 of each block's largest value) in every
/// mat-vec; carried through the layers that stays within a few percent.
pub const INT8_ACTIVATION_TOLERANCE: f32 = 5e-2;

/// The first `5 + n` logits rows of 16 steps of `model` from a fixed
/// prompt, and the tokens it chose.
pub fn sixteen_steps(model: &mut Model) -> kernelscope_model::Generation {
    model
        .generate(&kernelscope_model::GenerationRequest {
            stop_at_eos: false,
            keep_logits: true,
            ..kernelscope_model::GenerationRequest::new(&[1, 2, 3, 4, 5], 16)
        })
        .unwrap()
}

/// Rows of logits to compare: the prompt's and the generated ones while
/// both runs chose the same tokens (after a different choice the contexts
/// differ).
pub fn agreeing_rows(a: &kernelscope_model::Generation, b: &kernelscope_model::Generation) -> usize {
    5 + a
        .generated
        .iter()
        .zip(&b.generated)
        .take_while(|(x, y)| x == y)
        .count()
        .min(15)
}
