//! Block-quantized weight formats as llama.cpp (ggml) stores them in GGUF
//! files: the layout of each block, dequantization, the reference
//! quantizers, and the dot product of a quantized row with an f32 vector.
//! Ops read quantized weights through this module, so a format is written
//! once here and every op and the GGUF loader agree on its bytes: one file
//! per format in `formats/` (its block layout as a struct whose size is
//! checked at compile time, dequantize, quantize, GPU planes and integer
//! product), listed once in `formats/mod.rs`, which makes [`QuantFormat`].
//!
//! Dequantization is bit-exact with llama.cpp's C (`dequantize_row_*` in
//! ggml-quants.c) and with gguf-py; quantization is byte-identical with
//! llama.cpp's reference quantizers (`quantize_row_*_ref`).
//! tests/quant_formats.rs checks both against fixtures that
//! tools/reference/quant_fixtures.py makes with llama.cpp and gguf-py.
//!
//! ```
//! use kernelscope::quant::QuantFormat;
//!
//! let values: Vec<f32> = (0..256).map(|i| (i as f32 * 0.37).sin()).collect();
//! let format = QuantFormat::Q4_K;
//! let mut blocks = vec![0u8; format.row_bytes(values.len()).unwrap()];
//! format.quantize_row(&values, &mut blocks)?;
//! let mut restored = vec![0.0f32; values.len()];
//! format.dequantize_row(&blocks, &mut restored)?;
//! let dot = format.dot_row(&blocks, &values)?;
//! assert!((dot - restored.iter().zip(&values).map(|(a, b)| a * b).sum::<f32>()).abs() < 1e-3);
//! # Ok::<(), kernelscope::quant::QuantError>(())
//! ```

mod block_format;
mod error;
pub mod formats;
mod int8;
pub mod k_scales;
pub mod planes;
mod rows;
mod shared;

pub use error::QuantError;
pub use formats::QuantFormat;
pub use int8::{Int8Activations, quantize_activations};
