//! The GGUF container (llama.cpp's model file format, versions 2 and 3):
//! reading, with every length and offset checked against the file before it
//! is trusted, tensor data memory-mapped in place; and writing, streamed
//! tensor by tensor into a temporary file renamed into place when complete.
//!
//! The format, as llama.cpp's `ggml/src/gguf.cpp` and gguf-py define it
//! (little-endian throughout):
//!
//! ```text
//! "GGUF"  u32 version  u64 tensor_count  u64 kv_count
//! kv_count × { string key, u32 value_type, value }
//! tensor_count × { string name, u32 n_dims, n_dims × u64 dim, u32 ggml_type, u64 offset }
//! padding to `general.alignment` (default 32)
//! tensor data: each tensor at its offset from here, aligned
//! ```
//!
//! A string is a u64 byte length and UTF-8 bytes; an array is a u32 element
//! type, a u64 count and the elements. Dimensions are in ggml's order:
//! `dims[0]` is the innermost (a row's length), the reverse of the
//! row-major shape safetensors and PyTorch write.
//!
//! A model may be split over files named `NAME-00001-of-00003.gguf`
//! (llama.cpp's `gguf-split`), each carrying `split.no` (from 0) and
//! `split.count`; [`GgufFile::open`] on the first part opens the rest.
//!
//! What the reader accepts follows `gguf.cpp`, with two differences: a
//! string must be UTF-8 (gguf.cpp takes any bytes), and tensors may lie at
//! any aligned, non-overlapping offsets inside the file (gguf.cpp insists
//! each begins where the previous one's padded bytes end, which every known
//! writer does anyway).

mod encode;
mod file;
mod metadata;
mod reader;
mod tensors;
mod types;
mod value;
mod writer;

pub use file::{GgufFile, GgufPart, MappedTensor};
pub use kernelscope::ops::WeightFormat;
pub use metadata::Metadata;
pub use reader::{GgufHeader, read_gguf_header};
pub use tensors::TensorInfo;
pub use types::TensorType;
pub use value::{Array, Value, ValueType};
pub use writer::{GgufTensorWriter, GgufWriter, stop_writing};

/// The four bytes every GGUF file begins with.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// The version [`GgufWriter`] writes; the reader takes 2 and 3, which have
/// the same little-endian layout (version 3 added big-endian files, which
/// are refused).
pub const VERSION: u32 = 3;

/// The data section's alignment when the file sets no `general.alignment`.
pub const DEFAULT_ALIGNMENT: u32 = 32;

/// The most dimensions a tensor has (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;

/// The longest tensor name in bytes: ggml keeps names in a 64-byte buffer
/// with its NUL (`GGML_MAX_NAME`), and llama.cpp refuses longer ones.
pub const MAX_TENSOR_NAME_BYTES: usize = 63;

/// The key setting the data section's alignment (a u32 power of two).
pub const KEY_ALIGNMENT: &str = "general.alignment";

/// The key naming the model's architecture (`llama`, `qwen2`, ...).
pub const KEY_ARCHITECTURE: &str = "general.architecture";

/// Which part of a split model a file is, counted from 0 (a u16 in
/// llama.cpp's files).
pub const KEY_SPLIT_NO: &str = "split.no";

/// How many files a split model has (u16).
pub const KEY_SPLIT_COUNT: &str = "split.count";

/// How many tensors all the parts of a split model hold together (i32).
pub const KEY_SPLIT_TENSORS_COUNT: &str = "split.tensors.count";

/// The path of part `split_no` (counted from 0, as `split.no` counts) of a
/// model split into `split_count` files: `PREFIX-00001-of-00003.gguf` for
/// part 0 of 3, as llama.cpp's `llama_split_path` names them.
pub fn split_part_path(prefix: &std::path::Path, split_no: u16, split_count: u16) -> std::path::PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(split_part_suffix(split_no, split_count));
    std::path::PathBuf::from(name)
}

/// `-00001-of-00003.gguf`: what follows the prefix in a part's file name.
fn split_part_suffix(split_no: u16, split_count: u16) -> String {
    format!("-{:05}-of-{:05}.gguf", u32::from(split_no) + 1, split_count)
}
