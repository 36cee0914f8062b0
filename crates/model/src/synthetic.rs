//! Synthetic checkpoints: deterministic seeded random weights for any
//! preset, written as a Hugging Face directory (`config.json` +
//! `model.safetensors`) or generated straight into device buffers. Each
//! tensor's values come from SplitMix64 seeded by the run's seed and an
//! FNV-1a hash of the tensor's name, both defined in our code, so the bytes
//! never change between versions. Scales keep activations finite over
//! hundreds of steps: linear weights have variance 1/fan_in, norm weights
//! sit near 1.

use std::borrow::Cow;
use std::path::Path;

use half::{bf16, f16};
use kernelscope::DType;
use kernelscope::hash::{Fnv1a64, fnv1a64};
use kernelscope::rng::SplitMix64;

use crate::config::{Config, ExpertLayout, TensorSpec};
use crate::error::{ModelError, Result};

/// What a synthetic checkpoint is made of: the weights' dtype and the seed
/// of their values, and whether to hide the progress bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyntheticOptions {
    /// The weights' dtype (bf16, f16 or f32).
    pub dtype: DType,
    /// Seed of the values: the same seed gives the same bytes.
    pub seed: u64,
    /// No progress bar.
    pub quiet: bool,
}

impl Default for SyntheticOptions {
    /// bf16 from seed 0 with a progress bar, as `kscope` builds presets
    /// unless told otherwise.
    fn default() -> SyntheticOptions {
        SyntheticOptions {
            dtype: DType::BF16,
            seed: 0,
            quiet: false,
        }
    }
}

/// How tensor `name` of `shape` is generated: its values are uniform on
/// `[low, high)`, the `i`-th (row-major) from the `i`-th value of SplitMix64
/// seeded by `seed`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TensorGenerator {
    /// The sequence's seed: the run's seed xor the FNV-1a hash of the name.
    pub seed: u64,
    /// Lower bound.
    pub low: f32,
    /// Upper bound (exclusive).
    pub high: f32,
}

impl TensorGenerator {
    /// The generator of tensor `name` of `shape` (the whole tensor's shape,
    /// which sets a weight's fan-in) for `seed`.
    pub fn new(name: &str, shape: &[usize], seed: u64) -> TensorGenerator {
        let (low, high) = if name.ends_with("norm.weight") {
            (0.9, 1.1)
        } else if name.ends_with(".bias") {
            (-0.1, 0.1)
        } else if name == "model.embed_tokens.weight" {
            (-1.0, 1.0)
        } else {
            // Uniform on ±sqrt(3/fan_in) has variance 1/fan_in. A shape without
            // dimensions (a scalar) has one input.
            let fan_in = shape.last().copied().unwrap_or(1);
            let bound = (3.0 / fan_in as f32).sqrt();
            (-bound, bound)
        };
        TensorGenerator {
            seed: seed ^ fnv1a64(name.as_bytes()),
            low,
            high,
        }
    }

    /// The value of element `index` (row-major in the whole tensor).
    pub fn value(&self, index: usize) -> f32 {
        let bits = SplitMix64::u64_at(self.seed, index as u64);
        SplitMix64::scale(SplitMix64::unit_f32(bits), self.low, self.high)
    }
}

/// The f32 values of tensor `name` of `shape` for `seed`: element i from
/// the i-th value of the sequence, made in parallel (each element is
/// addressed on its own, so a 30B model's 400 s of serial generation on 16
/// cores becomes tens).
pub fn tensor_values(name: &str, shape: &[usize], seed: u64) -> Vec<f32> {
    use rayon::prelude::*;
    let count: usize = shape.iter().product();
    let generator = TensorGenerator::new(name, shape, seed);
    let mut values = vec![0.0f32; count];
    const CHUNK: usize = 1 << 16;
    values
        .par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(chunk, values)| {
            for (offset, value) in values.iter_mut().enumerate() {
                *value = generator.value(chunk * CHUNK + offset);
            }
        });
    values
}

/// The values of the elements of tensor `name` of `shape` (the whole
/// tensor's) that `runs` name, as `(first element, length)` runs in order:
/// one rank's share, made without the rest of the tensor.
pub fn tensor_values_in(name: &str, shape: &[usize], seed: u64, runs: &[(usize, usize)]) -> Vec<f32> {
    let generator = TensorGenerator::new(name, shape, seed);
    runs.iter()
        .flat_map(|&(start, length)| (start..start + length).map(|index| generator.value(index)))
        .collect()
}

/// `values` rounded to the nearest value of `dtype` (f16 or bf16; f32
/// leaves them), kept as f32: a vector a GGUF file stores in F32 for a
/// checkpoint of that dtype holds such values.
pub fn round_to(dtype: DType, values: &mut [f32]) {
    match dtype {
        DType::F16 => values
            .iter_mut()
            .for_each(|value| *value = f16::from_f32(*value).to_f32()),
        DType::BF16 => values
            .iter_mut()
            .for_each(|value| *value = bf16::from_f32(*value).to_f32()),
        _ => {}
    }
}

/// `values` encoded as little-endian `dtype` bytes (round to nearest).
pub fn encode(values: &[f32], dtype: DType) -> Result<Vec<u8>> {
    Ok(match dtype {
        DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => values
            .iter()
            .flat_map(|v| f16::from_f32(*v).to_le_bytes())
            .collect(),
        DType::BF16 => values
            .iter()
            .flat_map(|v| bf16::from_f32(*v).to_le_bytes())
            .collect(),
        other => return Err(ModelError::UnsupportedDtype(other)),
    })
}

/// The torch dtype name of a weight dtype.
pub fn torch_dtype(dtype: DType) -> &'static str {
    match dtype {
        DType::BF16 => "bfloat16",
        DType::F16 => "float16",
        _ => "float32",
    }
}

fn safetensors_dtype(dtype: DType) -> Result<safetensors::Dtype> {
    match dtype {
        DType::F32 => Ok(safetensors::Dtype::F32),
        DType::F16 => Ok(safetensors::Dtype::F16),
        DType::BF16 => Ok(safetensors::Dtype::BF16),
        other => Err(ModelError::UnsupportedDtype(other)),
    }
}

/// A tensor whose bytes are generated when the writer asks for them, so a
/// multi-gigabyte checkpoint never sits in memory at once.
struct LazyTensor<'a> {
    /// The engine's tensors whose runs it is made of, in order.
    sources: Vec<(TensorSpec, usize, usize)>,
    shape: Vec<usize>,
    dtype: DType,
    seed: u64,
    progress: &'a indicatif::ProgressBar,
}

impl safetensors::View for LazyTensor<'_> {
    fn dtype(&self) -> safetensors::Dtype {
        safetensors_dtype(self.dtype).expect("checked before writing")
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        let values: Vec<f32> = self
            .sources
            .iter()
            .flat_map(|(spec, start, length)| {
                tensor_values_in(&spec.name, &spec.shape, self.seed, &[(*start, *length)])
            })
            .collect();
        let bytes = encode(&values, self.dtype).expect("checked before writing");
        self.progress.inc(bytes.len() as u64);
        Cow::Owned(bytes)
    }

    fn data_len(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size_in_bytes()
    }
}

/// Writes `config` with the seeded weights of `options` as a Hugging Face
/// directory at `out` (created if needed): `config.json` and
/// `model.safetensors`. Tensors are generated one at a time as they are
/// written; each file goes to a temporary name first and is renamed into
/// place only when both are complete, so a failure leaves `out` as it was.
pub fn write_checkpoint(config: &Config, out: &Path, options: SyntheticOptions) -> Result<()> {
    write_checkpoint_in(config, out, options, ExpertLayout::PerExpert)
}

/// [`write_checkpoint`] with a sparse model's experts in `layout` (the
/// Hub's one tensor per expert, or transformers 5's stacked tensors).
pub fn write_checkpoint_in(
    config: &Config,
    out: &Path,
    options: SyntheticOptions,
    layout: ExpertLayout,
) -> Result<()> {
    let SyntheticOptions { dtype, seed, quiet } = options;
    safetensors_dtype(dtype)?;
    let total_bytes = config.parameter_count() * dtype.size_in_bytes();
    let progress = crate::progress::progress_bar(total_bytes, quiet, "writing weights");
    std::fs::create_dir_all(out).map_err(|source| ModelError::Io {
        path: out.to_path_buf(),
        source,
    })?;
    let config_path = out.join("config.json");
    let config_temporary = temporary_beside(&config_path);
    let weights_path = out.join("model.safetensors");
    let weights_temporary = temporary_beside(&weights_path);
    let written = (|| {
        std::fs::write(&config_temporary, config.to_json(torch_dtype(dtype))).map_err(|source| {
            ModelError::Io {
                path: config_temporary.clone(),
                source,
            }
        })?;
        let tensors: Vec<(String, LazyTensor)> = config
            .file_tensors(layout)
            .into_iter()
            .map(|file| {
                (
                    file.name,
                    LazyTensor {
                        sources: file.sources,
                        shape: file.shape,
                        dtype,
                        seed,
                        progress: &progress,
                    },
                )
            })
            .collect();
        // One metadata key only: the map's iteration order is random, and the
        // bytes of the file must not be.
        let metadata = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
        safetensors::serialize_to_file(tensors, Some(metadata), &weights_temporary).map_err(|error| {
            ModelError::Safetensors {
                path: weights_path.clone(),
                problem: error.to_string(),
            }
        })?;
        // Both files are complete before either replaces what was there.
        for (temporary, path) in [
            (&weights_temporary, &weights_path),
            (&config_temporary, &config_path),
        ] {
            std::fs::rename(temporary, path).map_err(|source| ModelError::Io {
                path: path.clone(),
                source,
            })?;
        }
        Ok(())
    })();
    progress.finish_and_clear();
    if written.is_err() {
        let _ = std::fs::remove_file(&config_temporary);
        let _ = std::fs::remove_file(&weights_temporary);
    }
    written
}

/// A hidden temporary name in the same folder (so the rename is atomic).
fn temporary_beside(path: &Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.kscope-{}.tmp", std::process::id()))
}

/// FNV-1a 64 of a file's bytes, printed by `gen-model` and checked by tests
/// so that a change to the generator cannot go unnoticed.
pub fn file_digest(path: &Path) -> Result<u64> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut hash = Fnv1a64::new();
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let read = file.read(&mut chunk).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if read == 0 {
            return Ok(hash.finish());
        }
        hash.update(&chunk[..read]);
    }
}

/// GPT-2's byte-to-character table of byte-level BPE: printable bytes stand
/// for themselves, the rest for characters from U+0100 on.
pub fn byte_level_alphabet() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for byte in 0..=255u8 {
        let printable = matches!(byte, 33..=126 | 161..=172 | 174..=255);
        table[byte as usize] = if printable {
            char::from(byte)
        } else {
            let character = char::from_u32(next).expect("below the surrogates");
            next += 1;
            character
        };
    }
    table
}

/// A small byte-level BPE `tokenizer.json` (the kind GPT-2, Llama 3 and
/// Qwen2 use): the 256 byte symbols as ids 0..256 in byte order, then one
/// id per merge (`"a b"` joins the symbols `a` and `b`, written in the
/// byte-level alphabet, e.g. `Ġ` for a space), then `special_tokens`. Any
/// text encodes and decodes back exactly. For tests and synthetic models.
pub fn byte_level_tokenizer_json(merges: &[&str], special_tokens: &[&str]) -> String {
    let alphabet = byte_level_alphabet();
    let mut vocabulary = serde_json::Map::new();
    for (id, symbol) in alphabet.iter().enumerate() {
        vocabulary.insert(symbol.to_string(), id.into());
    }
    for merge in merges {
        let joined: String = merge.split(' ').collect();
        let id = vocabulary.len();
        vocabulary.entry(joined).or_insert(id.into());
    }
    let added: Vec<serde_json::Value> = special_tokens
        .iter()
        .enumerate()
        .map(|(index, content)| {
            serde_json::json!({
                "id": vocabulary.len() + index,
                "content": content,
                "single_word": false,
                "lstrip": false,
                "rstrip": false,
                "normalized": false,
                "special": true,
            })
        })
        .collect();
    let byte_level = serde_json::json!({
        "type": "ByteLevel",
        "add_prefix_space": false,
        "trim_offsets": true,
        "use_regex": true,
    });
    serde_json::to_string_pretty(&serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": byte_level,
        "post_processor": null,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": false,
            "byte_fallback": false,
            "ignore_merges": false,
            "vocab": vocabulary,
            "merges": merges,
        },
    }))
    .expect("plain JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_to_a_dtype_gives_its_nearest_values_and_encodes_them_exactly() {
        let original = tensor_values("model.norm.weight", &[4096], 5);
        for dtype in [DType::BF16, DType::F16] {
            let mut rounded = original.clone();
            round_to(dtype, &mut rounded);
            // Kept exactly by the dtype, within half its step of each value,
            // and changed where the value was not of the dtype already.
            assert_eq!(
                encode(&rounded, dtype).unwrap(),
                encode(&original, dtype).unwrap()
            );
            let step = if dtype == DType::BF16 {
                2f32.powi(-7)
            } else {
                2f32.powi(-10)
            };
            assert!(
                rounded
                    .iter()
                    .zip(&original)
                    .all(|(r, o)| (r - o).abs() <= step / 2.0 * o.abs().max(1.0))
            );
            assert!(rounded.iter().zip(&original).any(|(r, o)| r != o));
        }
        let mut same = original.clone();
        round_to(DType::F32, &mut same);
        assert_eq!(same, original);
    }
}
