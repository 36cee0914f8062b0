//! The tensor table of a GGUF header: each tensor's name, dimensions, type
//! and offset read and bounded, then placed in the data section, aligned,
//! inside the file and apart from every other tensor.

use std::collections::HashMap;
use std::path::Path;

use kernelscope::ops::WeightFormat;

use crate::error::{Result, shown};

use super::constants::{MAX_DIMS, MAX_TENSOR_NAME_BYTES};
use super::cursor::{Cursor, What};
use super::types::{TensorType, describe_unknown_type};

/// The fewest bytes a tensor info takes: a one-byte name with its length,
/// `n_dims` (0), the type and the offset.
const MIN_TENSOR_INFO_BYTES: usize = 8 + 1 + 4 + 4 + 8;

/// One tensor as its file describes it, placed and checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    name: String,
    dims: Vec<u64>,
    tensor_type: TensorType,
    relative_offset: u64,
    file_offset: usize,
    byte_len: usize,
    pub(crate) part: usize,
}

impl TensorInfo {
    /// The tensor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The dimensions in ggml's order: `dims()[0]` is the innermost, the
    /// length of a row. Empty for a 0-dimensional tensor (one element).
    pub fn dims(&self) -> &[u64] {
        &self.dims
    }

    /// The shape in row-major order, outermost first (the dimensions
    /// reversed), as safetensors and PyTorch write shapes.
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }

    /// The number of elements (1 for a 0-dimensional tensor).
    pub fn element_count(&self) -> u64 {
        // Checked not to overflow when the file was read.
        self.dims.iter().product()
    }

    /// The element type.
    pub fn tensor_type(&self) -> TensorType {
        self.tensor_type
    }

    /// The offset of the first byte from the start of the data section, as
    /// the file stores it.
    pub fn relative_offset(&self) -> u64 {
        self.relative_offset
    }

    /// The offset of the first byte from the start of its file.
    pub fn file_offset(&self) -> usize {
        self.file_offset
    }

    /// Length in bytes.
    pub fn byte_len(&self) -> usize {
        self.byte_len
    }

    /// Which file of a split model holds it (an index into
    /// [`GgufFile::parts`](super::GgufFile::parts); 0 for a single file).
    pub fn part(&self) -> usize {
        self.part
    }

    /// How the engine reads this tensor, or the error naming it and its type
    /// when the engine does not run that type (`path` names its file).
    pub fn supported_format(&self, path: &Path) -> Result<WeightFormat> {
        self.tensor_type.supported_format(path, &self.name)
    }
}

/// A tensor info as read, before the data section's start is known.
pub(super) struct Unplaced {
    name: String,
    dims: Vec<u64>,
    tensor_type: TensorType,
    relative_offset: u64,
    byte_len: u64,
}

pub(super) fn read_tensor_infos(cursor: &mut Cursor, tensor_count: u64) -> Result<Vec<Unplaced>> {
    let tensor_count = cursor.count(tensor_count, MIN_TENSOR_INFO_BYTES, "tensor infos", &|| {
        "the tensor count".into()
    })?;
    let mut tensors = Vec::with_capacity(tensor_count);
    let mut seen: HashMap<String, usize> = HashMap::with_capacity(tensor_count);
    for index in 0..tensor_count {
        let name = cursor.string(&|| format!("the name of tensor {index}"))?;
        if name.is_empty() {
            return Err(cursor.error(format!("tensor {index} has an empty name")));
        }
        let tensor = || format!("tensor `{}`", shown(&name));
        if name.len() > MAX_TENSOR_NAME_BYTES {
            return Err(cursor.error(format!(
                "{} has a name of {} bytes; ggml allows at most {MAX_TENSOR_NAME_BYTES}",
                tensor(),
                name.len()
            )));
        }
        if let Some(earlier) = seen.get(&name) {
            return Err(cursor.error(format!(
                "{} appears twice (tensors {earlier} and {index})",
                tensor()
            )));
        }
        let dims = read_dims(cursor, &tensor)?;
        let type_id = cursor.u32(&|| format!("the type of {}", tensor()))?;
        let tensor_type = TensorType::from_ggml_type(type_id)
            .ok_or_else(|| cursor.error(format!("{} has {}", tensor(), describe_unknown_type(type_id))))?;
        let byte_len = byte_len(cursor, &dims, tensor_type, &tensor)?;
        let relative_offset = cursor.u64(&|| format!("the data offset of {}", tensor()))?;
        seen.insert(name.clone(), index);
        tensors.push(Unplaced {
            name,
            dims,
            tensor_type,
            relative_offset,
            byte_len,
        });
    }
    Ok(tensors)
}

/// The dimensions, refused past ggml's four or past what int64 holds
/// (gguf.cpp reads them as int64, so larger values are negative there).
fn read_dims(cursor: &mut Cursor, tensor: What) -> Result<Vec<u64>> {
    let n_dims = cursor.u32(&|| format!("the dimension count of {}", tensor()))?;
    if n_dims as usize > MAX_DIMS {
        return Err(cursor.error(format!(
            "{} has {n_dims} dimensions; ggml allows at most {MAX_DIMS}",
            tensor()
        )));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for dim in 0..n_dims {
        let value = cursor.u64(&|| format!("dimension {dim} of {}", tensor()))?;
        if value > i64::MAX as u64 {
            return Err(cursor.error(format!(
                "{}: dimension {dim} is {value}, more than ggml's int64 dimensions hold",
                tensor()
            )));
        }
        dims.push(value);
    }
    Ok(dims)
}

/// The tensor's size in bytes: its element count must fit int64, its rows
/// must be whole blocks of its type.
fn byte_len(cursor: &Cursor, dims: &[u64], tensor_type: TensorType, tensor: What) -> Result<u64> {
    let elements = dims
        .iter()
        .try_fold(1u64, |product, &dim| product.checked_mul(dim))
        .filter(|&elements| elements <= i64::MAX as u64)
        .ok_or_else(|| {
            cursor.error(format!(
                "{}: dimensions {dims:?} hold more elements than ggml's int64 counts",
                tensor()
            ))
        })?;
    let row = dims.first().copied().unwrap_or(1);
    if !row.is_multiple_of(tensor_type.block_elements() as u64) {
        return Err(cursor.error(format!(
            "{} is {tensor_type}, stored in blocks of {} elements, but its rows (dimension 0) have {row}",
            tensor(),
            tensor_type.block_elements()
        )));
    }
    tensor_type.byte_len(elements).ok_or_else(|| {
        cursor.error(format!(
            "{}: {elements} elements of {tensor_type} overflow a 64-bit byte count",
            tensor()
        ))
    })
}

/// Turns each tensor's offset from the data section into its bytes in the
/// file: aligned, inside the file, and apart from every other tensor.
pub(super) fn place_tensors(
    cursor: &Cursor,
    unplaced: Vec<Unplaced>,
    data_offset: u64,
    alignment: u32,
) -> Result<Vec<TensorInfo>> {
    let file_len = cursor.bytes.len() as u64;
    if !unplaced.is_empty() && data_offset > file_len {
        return Err(cursor.error(format!(
            "truncated: the tensor data starts at offset {data_offset} (the header padded to {alignment} bytes) but the file has {file_len} bytes"
        )));
    }
    let mut tensors = Vec::with_capacity(unplaced.len());
    for tensor in unplaced {
        let name = shown(&tensor.name);
        if !tensor.relative_offset.is_multiple_of(u64::from(alignment)) {
            return Err(cursor.error(format!(
                "tensor `{name}`: data offset {} is not a multiple of the alignment {alignment}",
                tensor.relative_offset
            )));
        }
        let start = data_offset.checked_add(tensor.relative_offset);
        let end = start.and_then(|start| start.checked_add(tensor.byte_len));
        let (Some(start), Some(end)) = (start, end) else {
            return Err(cursor.error(format!(
                "tensor `{name}`: data offset {} plus {} bytes overflows a 64-bit file offset",
                tensor.relative_offset, tensor.byte_len
            )));
        };
        if end > file_len {
            return Err(cursor.error(format!(
                "tensor `{name}` (file bytes {start}..{end}) ends past the end of the file ({file_len} bytes): truncated?"
            )));
        }
        tensors.push(TensorInfo {
            name: tensor.name,
            dims: tensor.dims,
            tensor_type: tensor.tensor_type,
            relative_offset: tensor.relative_offset,
            // Both are at most the file's length, a usize.
            file_offset: start as usize,
            byte_len: tensor.byte_len as usize,
            part: 0,
        });
    }
    check_apart(cursor, &tensors)?;
    Ok(tensors)
}

/// Refuses two tensors sharing a byte (tensors of no bytes share none).
fn check_apart(cursor: &Cursor, tensors: &[TensorInfo]) -> Result<()> {
    let mut by_start: Vec<&TensorInfo> = tensors.iter().filter(|tensor| tensor.byte_len > 0).collect();
    by_start.sort_by_key(|tensor| tensor.file_offset);
    for pair in by_start.windows(2) {
        let (before, after) = (pair[0], pair[1]);
        let before_end = before.file_offset + before.byte_len;
        if after.file_offset < before_end {
            return Err(cursor.error(format!(
                "tensors `{}` (file bytes {}..{before_end}) and `{}` (file bytes {}..{}) overlap",
                shown(&before.name),
                before.file_offset,
                shown(&after.name),
                after.file_offset,
                after.file_offset + after.byte_len
            )));
        }
    }
    Ok(())
}
