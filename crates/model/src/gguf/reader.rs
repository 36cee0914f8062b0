//! Parsing a GGUF header from bytes (a memory map, or a fuzzer's input):
//! every count and length is checked against the bytes that remain before
//! anything is allocated for it, every tensor is placed inside the file,
//! aligned and apart from the others, and every refusal is one line naming
//! the file and the key or tensor at fault.

use std::path::Path;

use crate::error::{Result, shown};

use super::metadata::Metadata;

use super::constants::{DEFAULT_ALIGNMENT, KEY_ALIGNMENT, MAGIC};
use super::cursor::{Cursor, What};
use super::tensors::{TensorInfo, place_tensors, read_tensor_infos};
use super::value::{Array, Value, ValueType};

/// The fewest bytes a metadata entry takes: a key of one byte with its u64
/// length, the u32 type, a one-byte value.
const MIN_ENTRY_BYTES: usize = 8 + 1 + 4 + 1;
/// Host memory one string element costs once read and turned into a
/// tokenizer: its `String` (24 bytes and an allocation of at least 32),
/// the vocabulary's copy, and the tokenizer's maps of it. An element takes
/// 8 bytes of the file, so a file of short tokens asks for some 30 times
/// its size; this is checked against the memory there is before reading.
const STRING_ELEMENT_MEMORY_BYTES: u64 = 256;

/// Everything before a GGUF file's tensor data, checked against the file.
#[derive(Clone, Debug)]
pub struct GgufHeader {
    pub(crate) version: u32,
    pub(crate) alignment: u32,
    pub(crate) data_offset: u64,
    pub(crate) metadata: Metadata,
    pub(crate) tensors: Vec<TensorInfo>,
}

impl GgufHeader {
    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data section's alignment (`general.alignment`, else 32).
    pub fn alignment(&self) -> u32 {
        self.alignment
    }

    /// Where the data section starts: the header's end rounded up to the
    /// alignment. For a file without tensors this may be past its end.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The tensors, in the order the file lists them.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }
}

/// Reads the GGUF header at the start of `bytes` (the whole file: tensors
/// are checked to lie inside it), `path` naming the file in errors.
pub fn read_gguf_header(bytes: &[u8], path: &Path) -> Result<GgufHeader> {
    let mut cursor = Cursor {
        bytes,
        position: 0,
        path,
        lossy: Vec::new(),
    };
    let version = read_preamble(&mut cursor)?;
    let tensor_count = cursor.u64(&|| "the tensor count".into())?;
    let entry_count = cursor.u64(&|| "the metadata entry count".into())?;
    let metadata = read_metadata(&mut cursor, entry_count)?;
    let alignment = alignment(&metadata, &cursor)?;
    let unplaced = read_tensor_infos(&mut cursor, tensor_count)?;
    let header_end = cursor.position as u64;
    let data_offset = header_end
        .checked_next_multiple_of(u64::from(alignment))
        .ok_or_else(|| cursor.error("the data section's offset overflows".into()))?;
    let tensors = place_tensors(&cursor, unplaced, data_offset, alignment)?;
    Ok(GgufHeader {
        version,
        alignment,
        data_offset,
        metadata,
        tensors,
    })
}

/// The magic and the version, refused unless a little-endian 2 or 3.
fn read_preamble(cursor: &mut Cursor) -> Result<u32> {
    if cursor.bytes.len() < MAGIC.len() {
        return Err(cursor.error(format!(
            "truncated: {} bytes, shorter than the 4-byte magic `GGUF`",
            cursor.bytes.len()
        )));
    }
    let magic = cursor.take(MAGIC.len(), &|| "the magic".into())?;
    if magic != MAGIC {
        let shown_magic: String = magic
            .iter()
            .flat_map(|&byte| std::ascii::escape_default(byte))
            .map(char::from)
            .collect();
        return Err(cursor.error(format!(
            "not a GGUF file: it begins with `{shown_magic}`, not `GGUF`"
        )));
    }
    let version = cursor.u32(&|| "the version".into())?;
    match version {
        2 | 3 => Ok(version),
        1 => Err(cursor.error(
            "GGUF version 1 is not supported (llama.cpp dropped it too): convert the model again with a current llama.cpp"
                .into(),
        )),
        // What gguf.cpp takes for a file of the other byte order.
        _ if matches!(version.swap_bytes(), 1..=3) => Err(cursor.error(format!(
            "a big-endian GGUF file (its version reads as {version:#010x}, which is {} byte-swapped): only little-endian files are read",
            version.swap_bytes()
        ))),
        _ => Err(cursor.error(format!(
            "GGUF version {version} is not supported (versions 2 and 3 are)"
        ))),
    }
}

fn read_metadata(cursor: &mut Cursor, entry_count: u64) -> Result<Metadata> {
    let entry_count = cursor.count(entry_count, MIN_ENTRY_BYTES, "metadata entries", &|| {
        "the metadata entry count".into()
    })?;
    let mut metadata = Metadata::new(cursor.path);
    for entry in 0..entry_count {
        let key = cursor.string(&|| format!("the key of metadata entry {entry}"))?;
        if key.is_empty() {
            return Err(cursor.error(format!("metadata entry {entry} has an empty key")));
        }
        let what = || format!("metadata key `{}`", shown(&key));
        let type_id = cursor.u32(&|| format!("the value type of {}", what()))?;
        let value_type = ValueType::from_id(type_id)
            .ok_or_else(|| cursor.error(format!("{} has unknown value type {type_id}", what())))?;
        let value = read_value(cursor, value_type, &what)?;
        if metadata.contains_key(&key) {
            return Err(cursor.error(format!("{} appears twice", what())));
        }
        metadata.insert(key, value);
    }
    for what in std::mem::take(&mut cursor.lossy) {
        metadata.note_lossy(what);
    }
    Ok(metadata)
}

fn read_value(cursor: &mut Cursor, value_type: ValueType, what: What) -> Result<Value> {
    Ok(match value_type {
        ValueType::U8 => Value::U8(u8::from_le_bytes(cursor.array(what)?)),
        ValueType::I8 => Value::I8(i8::from_le_bytes(cursor.array(what)?)),
        ValueType::U16 => Value::U16(u16::from_le_bytes(cursor.array(what)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(cursor.array(what)?)),
        ValueType::U32 => Value::U32(u32::from_le_bytes(cursor.array(what)?)),
        ValueType::I32 => Value::I32(i32::from_le_bytes(cursor.array(what)?)),
        ValueType::U64 => Value::U64(u64::from_le_bytes(cursor.array(what)?)),
        ValueType::I64 => Value::I64(i64::from_le_bytes(cursor.array(what)?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(cursor.array(what)?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(cursor.array(what)?)),
        // Any byte but 0 is true, as gguf.cpp reads it.
        ValueType::Bool => Value::Bool(cursor.array::<1>(what)?[0] != 0),
        ValueType::String => Value::String(cursor.string(what)?),
        ValueType::Array => Value::Array(read_array(cursor, what)?),
    })
}

/// `count` fixed-size elements, decoded from one bounded slice.
fn numbers<T, const N: usize>(
    cursor: &mut Cursor,
    count: usize,
    what: What,
    decode: fn([u8; N]) -> T,
) -> Result<Vec<T>> {
    // `count` was checked against the bytes left, so this cannot overflow.
    let bytes = cursor.take(count * N, what)?;
    Ok(bytes
        .chunks_exact(N)
        .map(|chunk| decode(chunk.try_into().expect("chunks of N bytes")))
        .collect())
}

fn read_array(cursor: &mut Cursor, what: What) -> Result<Array> {
    let type_id = cursor.u32(&|| format!("the element type of {}", what()))?;
    let element_type = ValueType::from_id(type_id)
        .ok_or_else(|| cursor.error(format!("{} is an array of unknown value type {type_id}", what())))?;
    let nested = |cursor: &Cursor| {
        cursor.error(format!(
            "{} is a nested array (an array of arrays), which GGUF readers do not support",
            what()
        ))
    };
    if element_type == ValueType::Array {
        return Err(nested(cursor));
    }
    let count = cursor.u64(&|| format!("the element count of {}", what()))?;
    let items = format!("{element_type} elements");
    let count = cursor.count(count, element_type.min_encoded_bytes(), &items, what)?;
    Ok(match element_type {
        ValueType::U8 => Array::U8(numbers(cursor, count, what, u8::from_le_bytes)?),
        ValueType::I8 => Array::I8(numbers(cursor, count, what, i8::from_le_bytes)?),
        ValueType::U16 => Array::U16(numbers(cursor, count, what, u16::from_le_bytes)?),
        ValueType::I16 => Array::I16(numbers(cursor, count, what, i16::from_le_bytes)?),
        ValueType::U32 => Array::U32(numbers(cursor, count, what, u32::from_le_bytes)?),
        ValueType::I32 => Array::I32(numbers(cursor, count, what, i32::from_le_bytes)?),
        ValueType::U64 => Array::U64(numbers(cursor, count, what, u64::from_le_bytes)?),
        ValueType::I64 => Array::I64(numbers(cursor, count, what, i64::from_le_bytes)?),
        ValueType::F32 => Array::F32(numbers(cursor, count, what, f32::from_le_bytes)?),
        ValueType::F64 => Array::F64(numbers(cursor, count, what, f64::from_le_bytes)?),
        ValueType::Bool => Array::Bool(numbers(cursor, count, what, |[byte]: [u8; 1]| byte != 0)?),
        ValueType::String => {
            let needed = count as u64 * STRING_ELEMENT_MEMORY_BYTES;
            if let Some(available) = kernelscope::host_memory::available_bytes()
                && needed > available
            {
                return Err(cursor.error(format!(
                    "{}: {count} strings need about {} MiB of memory once read, more than the {} MiB available (the system's, or `ulimit -v`)",
                    what(),
                    needed >> 20,
                    available >> 20
                )));
            }
            // An element that is not UTF-8 is kept (U+FFFD for its invalid
            // bytes) and noted: llama.cpp loads a vocabulary holding one.
            let mut strings = Vec::with_capacity(count);
            for index in 0..count {
                let element = || format!("element {index} of {}", what());
                let (text, invalid) = cursor.string_lossy(&element)?;
                if let Some(offset) = invalid {
                    cursor.lossy.push(format!(
                        "{} is not UTF-8 (invalid byte at offset {offset})",
                        element()
                    ));
                }
                strings.push(text);
            }
            Array::String(strings)
        }
        ValueType::Array => return Err(nested(cursor)),
    })
}

/// `general.alignment`: a u32 power of two, 32 when absent.
fn alignment(metadata: &Metadata, cursor: &Cursor) -> Result<u32> {
    match metadata.get(KEY_ALIGNMENT) {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(Value::U32(alignment)) if alignment.is_power_of_two() => Ok(*alignment),
        Some(Value::U32(alignment)) => Err(cursor.error(format!(
            "metadata key `{KEY_ALIGNMENT}` is {alignment}, which is not a power of two"
        ))),
        Some(other) => Err(cursor.error(format!(
            "metadata key `{KEY_ALIGNMENT}` is {}, expected u32",
            other.describe_type()
        ))),
    }
}
