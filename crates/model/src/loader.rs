//! Reading `*.safetensors` checkpoints: single files and shards listed in
//! `model.safetensors.index.json`, memory-mapped so the CPU backend reads
//! weights in place. Truncated files and malformed headers are refused
//! before any tensor is used, naming the file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kernelscope::DType;
use memmap2::Mmap;

use crate::error::{ModelError, Result};

/// How to load a checkpoint.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// No progress bar.
    pub quiet: bool,
}

/// Where one tensor's bytes are.
#[derive(Clone, Debug)]
pub(crate) struct TensorLocation {
    pub file: usize,
    pub dtype: Option<DType>,
    pub dtype_name: String,
    pub shape: Vec<usize>,
    pub offset: usize,
}

/// The mapped files of a checkpoint and an index of their tensors.
pub(crate) struct Checkpoint {
    pub directory: PathBuf,
    pub files: Vec<(PathBuf, Arc<Mmap>)>,
    pub tensors: HashMap<String, TensorLocation>,
}

fn safetensors_files(directory: &Path) -> Result<Vec<PathBuf>> {
    let index = directory.join("model.safetensors.index.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|source| ModelError::Io {
            path: index.clone(),
            source,
        })?;
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|error| ModelError::Safetensors {
                path: index.clone(),
                problem: format!("malformed index: {error}"),
            })?;
        let map = value
            .get("weight_map")
            .and_then(|map| map.as_object())
            .ok_or_else(|| ModelError::Safetensors {
                path: index.clone(),
                problem: "the index has no `weight_map` object".into(),
            })?;
        let mut files: Vec<PathBuf> = map
            .values()
            .filter_map(|file| file.as_str())
            .map(|file| directory.join(file))
            .collect();
        files.sort();
        files.dedup();
        return Ok(files);
    }
    let single = directory.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let entries = std::fs::read_dir(directory).map_err(|source| ModelError::Io {
        path: directory.to_path_buf(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "safetensors")
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ModelError::Safetensors {
            path: directory.to_path_buf(),
            problem: "no *.safetensors files here".into(),
        });
    }
    Ok(files)
}

fn dtype_of(dtype: safetensors::Dtype) -> Option<DType> {
    match dtype {
        safetensors::Dtype::F32 => Some(DType::F32),
        safetensors::Dtype::F16 => Some(DType::F16),
        safetensors::Dtype::BF16 => Some(DType::BF16),
        _ => None,
    }
}

/// Checks the 8-byte header length against the file before parsing, so a
/// truncated file gets a message that says so.
fn check_header(path: &Path, bytes: &[u8]) -> Result<()> {
    let problem = |problem: String| ModelError::Safetensors {
        path: path.to_path_buf(),
        problem,
    };
    if bytes.len() < 8 {
        return Err(problem(format!(
            "truncated: {} bytes, shorter than the 8-byte header length",
            bytes.len()
        )));
    }
    let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    if header_len > (bytes.len() - 8) as u64 {
        return Err(problem(format!(
            "truncated or not safetensors: the header claims {header_len} bytes but the file has {} after the length",
            bytes.len() - 8
        )));
    }
    Ok(())
}

impl Checkpoint {
    /// Maps every safetensors file of `directory` and indexes its tensors.
    pub fn open(directory: &Path) -> Result<Checkpoint> {
        let mut files = Vec::new();
        let mut tensors = HashMap::new();
        for path in safetensors_files(directory)? {
            let file = std::fs::File::open(&path).map_err(|source| ModelError::Io {
                path: path.clone(),
                source,
            })?;
            // SAFETY: the mapping is read-only and the checkpoint is assumed
            // not to be modified while a model uses it (as every inference
            // engine that maps weights assumes).
            let map = unsafe { Mmap::map(&file) }.map_err(|source| ModelError::Io {
                path: path.clone(),
                source,
            })?;
            check_header(&path, &map)?;
            let parsed =
                safetensors::SafeTensors::deserialize(&map).map_err(|error| ModelError::Safetensors {
                    path: path.clone(),
                    problem: format!("malformed or truncated safetensors: {error}"),
                })?;
            let base = map.as_ptr() as usize;
            for (name, view) in parsed.tensors() {
                tensors.insert(
                    name,
                    TensorLocation {
                        file: files.len(),
                        dtype: dtype_of(view.dtype()),
                        dtype_name: format!("{:?}", view.dtype()).to_lowercase(),
                        shape: view.shape().to_vec(),
                        offset: view.data().as_ptr() as usize - base,
                    },
                );
            }
            drop(parsed);
            files.push((path, Arc::new(map)));
        }
        Ok(Checkpoint {
            directory: directory.to_path_buf(),
            files,
            tensors,
        })
    }

    /// The location of `name`, checked against the expected shape and dtype.
    pub fn locate(&self, name: &str, shape: &[usize], dtype: DType) -> Result<&TensorLocation> {
        let location = self.tensors.get(name).ok_or_else(|| ModelError::TensorMissing {
            directory: self.directory.clone(),
            name: name.to_string(),
        })?;
        let path = self.files[location.file].0.clone();
        if location.shape != shape {
            return Err(ModelError::TensorShape {
                path,
                name: name.to_string(),
                expected: shape.to_vec(),
                found: location.shape.clone(),
            });
        }
        if location.dtype != Some(dtype) {
            return Err(ModelError::TensorDtype {
                path,
                name: name.to_string(),
                expected: dtype.to_string(),
                found: location
                    .dtype
                    .map_or(location.dtype_name.clone(), |d| d.to_string()),
            });
        }
        Ok(location)
    }

    /// The checkpoint's weight dtype: that of the embedding table.
    pub fn dtype(&self) -> Result<DType> {
        let name = "model.embed_tokens.weight";
        let location = self.tensors.get(name).ok_or_else(|| ModelError::TensorMissing {
            directory: self.directory.clone(),
            name: name.to_string(),
        })?;
        location.dtype.ok_or_else(|| ModelError::TensorDtype {
            path: self.files[location.file].0.clone(),
            name: name.to_string(),
            expected: "bf16, f16 or f32".into(),
            found: location.dtype_name.clone(),
        })
    }
}
