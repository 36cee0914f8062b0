//! Opening GGUF files: each part memory-mapped and its header checked
//! against it, the parts of a split model (`NAME-00001-of-00003.gguf`)
//! found by name beside the first and merged into one table of tensors, and
//! zero-copy access to every tensor's bytes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use crate::error::{ModelError, Result, shown};

use super::constants::{KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT};
use super::metadata::Metadata;
use super::reader::read_gguf_header;
use super::tensors::TensorInfo;
use kernelscope::ops::WeightFormat;

/// One file of a GGUF model, mapped.
#[derive(Debug)]
pub struct GgufPart {
    path: PathBuf,
    map: Arc<Mmap>,
    version: u32,
    alignment: u32,
    data_offset: u64,
    metadata: Metadata,
}

impl GgufPart {
    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole file, mapped.
    pub fn map(&self) -> &Arc<Mmap> {
        &self.map
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data section's alignment.
    pub fn alignment(&self) -> u32 {
        self.alignment
    }

    /// Where the data section starts in the file.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// This file's own metadata (the later parts of a split model carry
    /// little more than the `split.*` keys).
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }
}

/// A tensor's bytes where they lie in a mapped file, for a loader that
/// keeps the mapping alive and reads or uploads the bytes in place.
#[derive(Clone, Debug)]
pub struct MappedTensor {
    /// The mapped file holding the tensor.
    pub map: Arc<Mmap>,
    /// The offset of the first byte in the file.
    pub offset: usize,
    /// Length in bytes.
    pub byte_len: usize,
}

impl MappedTensor {
    /// The tensor's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map[self.offset..self.offset + self.byte_len]
    }
}

/// A GGUF model: one file, or every part of a split one, with the tensors
/// of all parts in one table and the metadata of the first.
#[derive(Debug)]
pub struct GgufFile {
    parts: Vec<GgufPart>,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
}

impl GgufFile {
    /// Maps the GGUF file at `path` and checks its header, or, when it is
    /// the first part of a split model, every part's. Opening a later part
    /// is refused with the name of the first.
    pub fn open(path: &Path) -> Result<GgufFile> {
        let (first, first_tensors) = map_part(path)?;
        let split_count = split_key(&first.metadata, KEY_SPLIT_COUNT)?;
        let split_no = split_key(&first.metadata, KEY_SPLIT_NO)?;
        let count = split_count.unwrap_or(1);
        if count == 0 {
            return Err(gguf_error(path, format!("metadata key `{KEY_SPLIT_COUNT}` is 0")));
        }
        match split_no {
            Some(0) => {}
            None if count == 1 => {}
            None => {
                return Err(gguf_error(
                    path,
                    format!(
                        "`{KEY_SPLIT_COUNT}` is {count} but there is no `{KEY_SPLIT_NO}` saying which part this is"
                    ),
                ));
            }
            Some(no) if no >= count => {
                return Err(gguf_error(
                    path,
                    format!("`{KEY_SPLIT_NO}` is {no}, not below `{KEY_SPLIT_COUNT}` {count}"),
                ));
            }
            Some(no) => {
                let first_name = split_prefix(path, no, count)
                    .map(|prefix| split_part_path(&prefix, 0, count).display().to_string())
                    .unwrap_or_else(|| format!("the part whose `{KEY_SPLIT_NO}` is 0"));
                return Err(gguf_error(
                    path,
                    format!(
                        "this is part {} of {count} of a split model: open the first part, {first_name}",
                        no + 1
                    ),
                ));
            }
        }
        let mut model = GgufFile {
            parts: Vec::new(),
            tensors: Vec::new(),
            by_name: HashMap::new(),
        };
        model.add_part(first, first_tensors)?;
        if count > 1 {
            model.open_other_parts(path, count)?;
        }
        Ok(model)
    }

    fn open_other_parts(&mut self, path: &Path, count: u16) -> Result<()> {
        let prefix = split_prefix(path, 0, count).ok_or_else(|| {
            gguf_error(
                path,
                format!(
                    "`{KEY_SPLIT_COUNT}` says the model is split into {count} files, but this file's name does not end in `{}` (llama.cpp's naming), so the others cannot be found",
                    split_part_suffix(0, count)
                ),
            )
        })?;
        for no in 1..count {
            let part_path = split_part_path(&prefix, no, count);
            if std::fs::symlink_metadata(&part_path).is_err() {
                return Err(gguf_error(
                    path,
                    format!(
                        "part {} of {count} of this split model is missing: {}",
                        no + 1,
                        part_path.display()
                    ),
                ));
            }
            let (part, tensors) = map_part(&part_path)?;
            for (key, expected) in [(KEY_SPLIT_NO, no), (KEY_SPLIT_COUNT, count)] {
                let found = split_key(&part.metadata, key)?;
                if found != Some(expected) {
                    let found = found.map_or("missing".to_string(), |found| found.to_string());
                    return Err(gguf_error(
                        &part_path,
                        format!(
                            "metadata key `{key}` is {found}, expected {expected} for part {} of {count} (opened from {})",
                            no + 1,
                            path.display()
                        ),
                    ));
                }
            }
            self.add_part(part, tensors)?;
        }
        let declared = self.parts[0].metadata.get_u64_opt(KEY_SPLIT_TENSORS_COUNT)?;
        if let Some(declared) = declared
            && declared != self.tensors.len() as u64
        {
            return Err(gguf_error(
                path,
                format!(
                    "`{KEY_SPLIT_TENSORS_COUNT}` is {declared} but the {count} parts hold {} tensors",
                    self.tensors.len()
                ),
            ));
        }
        Ok(())
    }

    /// Adds `part` and its tensors, refusing a name another part has.
    fn add_part(&mut self, part: GgufPart, tensors: Vec<TensorInfo>) -> Result<()> {
        let index = self.parts.len();
        for mut tensor in tensors {
            if let Some(&earlier) = self.by_name.get(tensor.name()) {
                let earlier = &self.parts[self.tensors[earlier].part].path;
                return Err(gguf_error(
                    &part.path,
                    format!(
                        "tensor `{}` is also in {}: refusing to pick one",
                        shown(tensor.name()),
                        earlier.display()
                    ),
                ));
            }
            tensor.part = index;
            self.by_name.insert(tensor.name().to_string(), self.tensors.len());
            self.tensors.push(tensor);
        }
        self.parts.push(part);
        Ok(())
    }

    /// The file opened (the first part of a split model).
    pub fn path(&self) -> &Path {
        &self.parts[0].path
    }

    /// The format version of the file opened.
    pub fn version(&self) -> u32 {
        self.parts[0].version
    }

    /// Every file, the one opened first.
    pub fn parts(&self) -> &[GgufPart] {
        &self.parts
    }

    /// The metadata of the file opened (for a split model, the first part's,
    /// which holds the model's).
    pub fn metadata(&self) -> &Metadata {
        &self.parts[0].metadata
    }

    /// Every tensor of every part, in file order, part by part.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&index| &self.tensors[index])
    }

    /// The file holding `tensor`.
    ///
    /// # Panics
    ///
    /// When `tensor` is not one of this model's (from another `GgufFile`
    /// with more parts).
    pub fn part_of(&self, tensor: &TensorInfo) -> &GgufPart {
        &self.parts[tensor.part]
    }

    /// The bytes of `tensor`, in place in the mapped file.
    ///
    /// # Panics
    ///
    /// When `tensor` is not one of this model's and does not lie in the file
    /// its part number names.
    pub fn tensor_bytes(&self, tensor: &TensorInfo) -> &[u8] {
        let map = &self.part_of(tensor).map;
        map.get(tensor.file_offset()..tensor.file_offset() + tensor.byte_len())
            .expect("a tensor of this GgufFile lies inside its mapped file")
    }

    /// The mapping holding `tensor` and where in it the bytes are, for a
    /// loader that maps buffers in place.
    ///
    /// # Panics
    ///
    /// As [`GgufFile::tensor_bytes`].
    pub fn mapped_tensor(&self, tensor: &TensorInfo) -> MappedTensor {
        // Checks the range as tensor_bytes does.
        self.tensor_bytes(tensor);
        MappedTensor {
            map: Arc::clone(&self.part_of(tensor).map),
            offset: tensor.file_offset(),
            byte_len: tensor.byte_len(),
        }
    }

    /// How the engine reads `tensor`, or the error naming it, its type and
    /// its file when the engine does not run that type.
    pub fn tensor_format(&self, tensor: &TensorInfo) -> Result<WeightFormat> {
        tensor.supported_format(&self.part_of(tensor).path)
    }
}

fn gguf_error(path: &Path, problem: String) -> ModelError {
    ModelError::Gguf {
        path: path.to_path_buf(),
        problem,
    }
}

/// Maps `path` (a regular file) and reads its header.
fn map_part(path: &Path) -> Result<(GgufPart, Vec<TensorInfo>)> {
    let (file, _) = crate::files::open_regular_file(path)?;
    // SAFETY: the mapping is read-only and the model file is assumed not to
    // be modified while it is in use (as every engine that maps weights
    // assumes); its header is checked against the mapped bytes before any
    // tensor is read.
    let map = unsafe { Mmap::map(&file) }.map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let header = read_gguf_header(&map, path)?;
    let part = GgufPart {
        path: path.to_path_buf(),
        map: Arc::new(map),
        version: header.version,
        alignment: header.alignment,
        data_offset: header.data_offset,
        metadata: header.metadata,
    };
    Ok((part, header.tensors))
}

/// A `split.*` key as a u16, as llama.cpp reads them (any integer type that
/// fits is taken).
fn split_key(metadata: &Metadata, key: &str) -> Result<Option<u16>> {
    let Some(value) = metadata.get_u64_opt(key)? else {
        return Ok(None);
    };
    u16::try_from(value).map(Some).map_err(|_| {
        gguf_error(
            metadata.path(),
            format!("metadata key `{key}` is {value}, more than a u16"),
        )
    })
}

/// The prefix of `path` when its name ends as part `split_no` of
/// `split_count` does (`-00002-of-00003.gguf`), else `None`.
fn split_prefix(path: &Path, split_no: u16, split_count: u16) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let prefix = name.strip_suffix(&split_part_suffix(split_no, split_count))?;
    (!prefix.is_empty()).then(|| path.with_file_name(prefix))
}

/// The path of part `split_no` (counted from 0, as `split.no` counts) of a
/// model split into `split_count` files: `PREFIX-00001-of-00003.gguf` for
/// part 0 of 3, as llama.cpp's `llama_split_path` names them.
pub fn split_part_path(prefix: &Path, split_no: u16, split_count: u16) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(split_part_suffix(split_no, split_count));
    PathBuf::from(name)
}

/// `-00001-of-00003.gguf`: what follows the prefix in a part's file name.
fn split_part_suffix(split_no: u16, split_count: u16) -> String {
    format!("-{:05}-of-{:05}.gguf", u32::from(split_no) + 1, split_count)
}
