//! Hostile GGUF files through `kscope run FILE.gguf`: a valid file written
//! by `gen-model` and then broken in one place at a time (magic, version,
//! truncation, lengths and counts past the end, nested arrays, unknown
//! value and tensor types, duplicate keys, misaligned or overlapping or
//! out-of-bounds offsets, overflowing dimensions, a type kscope does not
//! run, a missing key, an unknown architecture). Each is exit 2 and one
//! line naming the file and the field or tensor, and the file is left as
//! it was.

use std::path::PathBuf;

use crate::helpers::Scratch;

/// Where the parts of a GGUF header lie, found by walking it.
struct Layout {
    /// Per key: (key, offset of its value type, offset of its value).
    keys: Vec<(String, usize, usize)>,
    /// Per tensor: (name, offset of n_dims, offset of its type, offset of its data offset).
    tensors: Vec<(String, usize, usize, usize)>,
    /// Where the tensor infos end.
    end: usize,
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// The size of a value of `kind` at `at` (arrays included).
fn value_len(bytes: &[u8], kind: u32, at: usize) -> usize {
    match kind {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        8 => 8 + u64_at(bytes, at) as usize,
        9 => {
            let (inner, count) = (u32_at(bytes, at), u64_at(bytes, at + 4) as usize);
            let mut length = 12;
            for _ in 0..count {
                length += value_len(bytes, inner, at + length);
            }
            length
        }
        other => panic!("value type {other}"),
    }
}

fn layout(bytes: &[u8]) -> Layout {
    let (tensor_count, key_count) = (u64_at(bytes, 8), u64_at(bytes, 16));
    let mut at = 24;
    let string = |at: &mut usize| {
        let length = u64_at(bytes, *at) as usize;
        let text = String::from_utf8(bytes[*at + 8..*at + 8 + length].to_vec()).unwrap();
        *at += 8 + length;
        text
    };
    let mut keys = Vec::new();
    for _ in 0..key_count {
        let key = string(&mut at);
        let kind = u32_at(bytes, at);
        keys.push((key, at, at + 4));
        at += 4 + value_len(bytes, kind, at + 4);
    }
    let mut tensors = Vec::new();
    for _ in 0..tensor_count {
        let name = string(&mut at);
        let dims = u32_at(bytes, at) as usize;
        let kind = at + 4 + 8 * dims;
        tensors.push((name, at, kind, kind + 4));
        at = kind + 12;
    }
    Layout {
        keys,
        tensors,
        end: at,
    }
}

struct GgufScratch {
    scratch: Scratch,
    good: Vec<u8>,
    layout: Layout,
}

impl GgufScratch {
    fn new(name: &str, quant: &str) -> GgufScratch {
        let scratch = Scratch::new(name);
        let path = scratch.0.join("model.gguf");
        crate::common::gen_gguf("tiny", quant, &path);
        let good = std::fs::read(&path).unwrap();
        let layout = layout(&good);
        GgufScratch {
            scratch,
            good,
            layout,
        }
    }

    fn path(&self) -> PathBuf {
        self.scratch.0.join("model.gguf")
    }

    /// Writes `bytes` as the model file and expects `kscope run` on it refused
    /// naming the file and every needle.
    fn refuses(&self, bytes: &[u8], needles: &[&str]) {
        std::fs::write(self.path(), bytes).unwrap();
        let path = self.path();
        let path = path.to_str().unwrap();
        let mut all = vec![path];
        all.extend_from_slice(needles);
        self.scratch.refuses(
            &["run", path, "--device", "cpu", "--max-tokens", "2", "--quiet"],
            &all,
        );
    }

    fn edited(&self, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut bytes = self.good.clone();
        edit(&mut bytes);
        bytes
    }

    fn key(&self, name: &str) -> (usize, usize) {
        let (_, kind, value) = self.layout.keys.iter().find(|(key, ..)| key == name).unwrap();
        (*kind, *value)
    }
}

#[test]
fn broken_headers_are_refused_by_field() {
    let file = GgufScratch::new("gguf-header", "q8_0");
    file.refuses(
        &file.edited(|bytes| bytes[..4].copy_from_slice(b"GGUG")),
        &["not a GGUF file"],
    );
    file.refuses(
        &file.edited(|bytes| bytes[4..8].copy_from_slice(&1u32.to_le_bytes())),
        &["version 1"],
    );
    file.refuses(
        &file.edited(|bytes| bytes[4..8].copy_from_slice(&99u32.to_le_bytes())),
        &["version 99"],
    );
    // Counts no file of this size could hold.
    file.refuses(
        &file.edited(|bytes| bytes[8..16].copy_from_slice(&u64::MAX.to_le_bytes())),
        &["tensor"],
    );
    file.refuses(
        &file.edited(|bytes| bytes[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes())),
        &["metadata entries"],
    );
    // Truncated in the header, in the tensor infos, in the data.
    for cut in [10, 30, file.layout.end - 3, file.good.len() - 1] {
        file.refuses(&file.good[..cut], &[]);
    }
}

#[test]
fn broken_metadata_is_refused_by_key() {
    let file = GgufScratch::new("gguf-metadata", "q8_0");
    // A string whose length runs past the end.
    let (_, value) = file.key("general.architecture");
    file.refuses(
        &file.edited(|bytes| bytes[value..value + 8].copy_from_slice(&(1u64 << 50).to_le_bytes())),
        &["general.architecture"],
    );
    // An array whose count runs past the end, and an array of arrays.
    let (_, tokens) = file.key("tokenizer.ggml.tokens");
    file.refuses(
        &file.edited(|bytes| bytes[tokens + 4..tokens + 12].copy_from_slice(&(1u64 << 60).to_le_bytes())),
        &["tokenizer.ggml.tokens"],
    );
    file.refuses(
        &file.edited(|bytes| bytes[tokens..tokens + 4].copy_from_slice(&9u32.to_le_bytes())),
        &["tokenizer.ggml.tokens", "nested"],
    );
    // An unknown value type.
    let (kind, _) = file.key("llama.block_count");
    file.refuses(
        &file.edited(|bytes| bytes[kind..kind + 4].copy_from_slice(&77u32.to_le_bytes())),
        &["llama.block_count"],
    );
    // A key the engine needs, renamed away; a key given twice.
    let renamed = |bytes: &mut Vec<u8>| {
        let key = b"llama.block_count";
        let at = bytes.windows(key.len()).position(|window| window == key).unwrap();
        bytes[at + key.len() - 1] = b'_';
    };
    file.refuses(&file.edited(renamed), &["llama.block_count", "missing"]);
    let doubled = |bytes: &mut Vec<u8>| {
        // `general.file_type` and `llama.block_count` are names of one length.
        let key = b"general.file_type";
        let at = bytes.windows(key.len()).position(|window| window == key).unwrap();
        bytes[at..at + key.len()].copy_from_slice(b"llama.block_count");
    };
    file.refuses(&file.edited(doubled), &["llama.block_count"]);
    // An architecture kscope does not run.
    let (_, value) = file.key("general.architecture");
    file.refuses(
        &file.edited(|bytes| bytes[value + 8..value + 13].copy_from_slice(b"gemma")),
        &["gemma", "general.architecture"],
    );
}

#[test]
fn broken_tensor_infos_are_refused_by_tensor() {
    let file = GgufScratch::new("gguf-tensors", "q4_0");
    let (name, dims, kind, offset) = file.layout.tensors[1].clone();
    // An unknown type id; a type ggml knows but kscope does not run (IQ4_NL
    // blocks are Q4_0's size, so the file stays consistent).
    file.refuses(
        &file.edited(|bytes| bytes[kind..kind + 4].copy_from_slice(&99u32.to_le_bytes())),
        &[&name],
    );
    let (_, _, q4_kind, _) = file
        .layout
        .tensors
        .iter()
        .find(|(_, _, kind, _)| u32::from_le_bytes(file.good[*kind..*kind + 4].try_into().unwrap()) == 2)
        .cloned()
        .unwrap();
    let q4_name = file
        .layout
        .tensors
        .iter()
        .find(|tensor| tensor.2 == q4_kind)
        .unwrap()
        .0
        .clone();
    file.refuses(
        &file.edited(|bytes| bytes[q4_kind..q4_kind + 4].copy_from_slice(&20u32.to_le_bytes())),
        &[&q4_name, "IQ4_NL"],
    );
    // A data offset misaligned, past the end, or onto another tensor.
    let read_offset = |at: usize| u64::from_le_bytes(file.good[at..at + 8].try_into().unwrap());
    let original = read_offset(offset);
    file.refuses(
        &file.edited(|bytes| bytes[offset..offset + 8].copy_from_slice(&(original + 1).to_le_bytes())),
        &[&name],
    );
    file.refuses(
        &file.edited(|bytes| bytes[offset..offset + 8].copy_from_slice(&(1u64 << 40).to_le_bytes())),
        &[&name],
    );
    let other = read_offset(file.layout.tensors[2].3);
    file.refuses(
        &file.edited(|bytes| bytes[offset..offset + 8].copy_from_slice(&other.to_le_bytes())),
        &["overlap"],
    );
    // Dimensions whose product overflows, and more dimensions than ggml has.
    file.refuses(
        &file.edited(|bytes| {
            bytes[dims + 4..dims + 12].copy_from_slice(&(1u64 << 40).to_le_bytes());
            bytes[dims + 12..dims + 20].copy_from_slice(&(1u64 << 40).to_le_bytes());
        }),
        &[&name],
    );
    file.refuses(
        &file.edited(|bytes| bytes[dims..dims + 4].copy_from_slice(&9u32.to_le_bytes())),
        &[&name],
    );
    // Two tensors of one name.
    let (first, second) = (file.layout.tensors[0].0.clone(), file.layout.tensors[1].0.clone());
    if first.len() == second.len() {
        let at = file
            .good
            .windows(second.len())
            .position(|window| window == second.as_bytes())
            .unwrap();
        file.refuses(
            &file.edited(|bytes| bytes[at..at + first.len()].copy_from_slice(first.as_bytes())),
            &[&first],
        );
    }
}

#[test]
fn metadata_that_disagrees_with_the_tensors_is_refused() {
    let file = GgufScratch::new("gguf-accounted", "f32");
    // block_count 2 of a file holding 4 layers' tensors: not 2 layers run silently.
    let (_, value) = file.key("llama.block_count");
    file.refuses(
        &file.edited(|bytes| bytes[value..value + 4].copy_from_slice(&2u32.to_le_bytes())),
        &[
            "tensors the metadata does not account for",
            "block_count 2",
            "`blk.2.",
        ],
    );
    // An embedding of 1,000 rows against 2,048 tokens: where the metadata
    // says 2,048 too, the shape is named (the metadata, not a config.json);
    // where it says 1,000 as well, the tokens are.
    let (_, dims, ..) = *file
        .layout
        .tensors
        .iter()
        .find(|(name, ..)| name == "token_embd.weight")
        .unwrap();
    let rows = |bytes: &mut Vec<u8>| bytes[dims + 12..dims + 20].copy_from_slice(&1000u64.to_le_bytes());
    file.refuses(
        &file.edited(rows),
        &["token_embd.weight", "[1000, 128]", "the file's metadata"],
    );
    let (_, vocab) = file.key("llama.vocab_size");
    file.refuses(
        &file.edited(|bytes| {
            rows(bytes);
            bytes[vocab..vocab + 4].copy_from_slice(&1000u32.to_le_bytes());
        }),
        &["tokenizer.ggml.tokens", "2048 tokens", "vocabulary is 1000"],
    );
}
