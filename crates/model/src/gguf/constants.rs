//! The numbers and key names the GGUF format fixes: a file of their own,
//! so that the reader, the writer and the split-file opener use them
//! without importing `mod.rs`, which only gathers the parts.

/// The four bytes every GGUF file begins with.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// The version [`GgufWriter`](super::GgufWriter) writes; the reader takes 2 and 3, which have
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
