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

mod constants;
mod cursor;
mod encode;
mod file;
mod metadata;
mod output;
mod reader;
mod tensors;
mod types;
mod value;
mod writer;

pub use constants::{
    DEFAULT_ALIGNMENT, KEY_ALIGNMENT, KEY_ARCHITECTURE, KEY_SPLIT_COUNT, KEY_SPLIT_NO,
    KEY_SPLIT_TENSORS_COUNT, MAGIC, MAX_DIMS, MAX_TENSOR_NAME_BYTES, VERSION,
};
pub use file::{GgufFile, GgufPart, MappedTensor, split_part_path};
pub use kernelscope::ops::WeightFormat;
pub use metadata::Metadata;
pub use reader::{GgufHeader, read_gguf_header};
pub use tensors::TensorInfo;
pub use types::TensorType;
pub use value::{Array, Value, ValueType};
pub use writer::{GgufTensorWriter, GgufWriter, stop_writing};
