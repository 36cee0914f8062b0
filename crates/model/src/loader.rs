//! Reading `*.safetensors` checkpoints: single files and shards listed in
//! `model.safetensors.index.json`, memory-mapped so the CPU backend reads
//! weights in place. Truncated files and malformed headers are refused
//! before any tensor is used, naming the file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kernelscope::DType;
use memmap2::Mmap;

use crate::config::{Config, ExpertLayout, LayerTensor, TensorRole, TensorSpec, router_names};
use crate::error::{ModelError, Result, one_line, shown};

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

/// The largest `model.safetensors.index.json` read (Llama 3 405B's is 100 KiB).
const MAX_INDEX_BYTES: u64 = 64 << 20;

/// The folder a checkpoint's files may resolve into: the model directory,
/// or for a Hugging Face cache snapshot (`models--org--name/snapshots/REV`)
/// the repository's cache folder, since snapshot files are symlinks into
/// its `blobs/`.
fn containment_root(directory: &Path) -> PathBuf {
    let snapshots = directory.parent();
    let repository = snapshots.and_then(Path::parent);
    match (snapshots.and_then(Path::file_name), repository) {
        (Some(name), Some(repository))
            if name == "snapshots"
                && repository
                    .file_name()
                    .is_some_and(|folder| folder.to_string_lossy().starts_with("models--")) =>
        {
            repository.to_path_buf()
        }
        _ => directory.to_path_buf(),
    }
}

/// The shard file names listed by an index's `weight_map`, sorted and
/// without repeats. Every value must be a string; the names are checked
/// against the directory by the caller.
pub fn parse_safetensors_index(bytes: &[u8], path: &Path) -> Result<Vec<String>> {
    let problem = |problem: String| ModelError::Safetensors {
        path: path.to_path_buf(),
        problem,
    };
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|error| problem(format!("malformed index: {}", one_line(&error.to_string()))))?;
    let map = value
        .get("weight_map")
        .and_then(|map| map.as_object())
        .ok_or_else(|| problem("the index has no `weight_map` object".into()))?;
    let mut files = Vec::new();
    for (tensor, file) in map {
        match file.as_str() {
            Some(file) => files.push(file.to_string()),
            None => {
                return Err(problem(format!(
                    "`weight_map` entry `{}` must name a file as a string, found {}",
                    shown(tensor),
                    file.to_string().chars().take(40).collect::<String>()
                )));
            }
        }
    }
    files.sort();
    files.dedup();
    if files.is_empty() {
        return Err(problem("the index's `weight_map` is empty".into()));
    }
    Ok(files)
}

fn safetensors_files(directory: &Path) -> Result<Vec<PathBuf>> {
    let root = containment_root(directory);
    let index = directory.join("model.safetensors.index.json");
    if index.exists() {
        let bytes = crate::files::read_regular_file(&index, MAX_INDEX_BYTES)?;
        return parse_safetensors_index(&bytes, &index)?
            .iter()
            .map(|name| crate::files::contained_path(directory, &root, name, &index))
            .collect();
    }
    let single = directory.join("model.safetensors");
    if std::fs::symlink_metadata(&single).is_ok() {
        return Ok(vec![crate::files::contained_path(
            directory,
            &root,
            "model.safetensors",
            directory,
        )?]);
    }
    let entries = std::fs::read_dir(directory).map_err(|source| ModelError::Io {
        path: directory.to_path_buf(),
        source,
    })?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ModelError::Io {
            path: directory.to_path_buf(),
            source,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".safetensors") {
            files.push(crate::files::contained_path(directory, &root, &name, directory)?);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(ModelError::Safetensors {
            path: directory.to_path_buf(),
            problem: "no *.safetensors files here".into(),
        });
    }
    Ok(files)
}

/// One tensor as a safetensors header describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name.
    pub name: String,
    /// The dtype as the file spells it, lower case (`bf16`, `f32`, `i64`, ...).
    pub dtype_name: String,
    /// The dtype, when it is one the engine runs (bf16, f16, f32).
    pub dtype: Option<DType>,
    /// The shape.
    pub shape: Vec<usize>,
    /// Offset of the first byte from the start of the file.
    pub offset: usize,
    /// Length in bytes.
    pub byte_len: usize,
}

/// The tensors of a safetensors file held in `bytes`, after checking that
/// the header fits the file, parses, and places every tensor inside the
/// file with a size that matches its shape and dtype (`path` names the file
/// in errors).
pub fn read_safetensors_header(bytes: &[u8], path: &Path) -> Result<Vec<TensorInfo>> {
    check_header(path, bytes)?;
    let parsed = safetensors::SafeTensors::deserialize(bytes).map_err(|error| ModelError::Safetensors {
        path: path.to_path_buf(),
        problem: format!(
            "malformed or truncated safetensors: {}",
            one_line(&error.to_string())
        ),
    })?;
    let base = bytes.as_ptr() as usize;
    let mut tensors: Vec<TensorInfo> = parsed
        .tensors()
        .into_iter()
        .map(|(name, view)| TensorInfo {
            name,
            dtype_name: format!("{:?}", view.dtype()).to_lowercase(),
            dtype: dtype_of(view.dtype()),
            shape: view.shape().to_vec(),
            offset: view.data().as_ptr() as usize - base,
            byte_len: view.data().len(),
        })
        .collect();
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(tensors)
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
        let mut files: Vec<(PathBuf, Arc<Mmap>)> = Vec::new();
        let mut tensors: HashMap<String, TensorLocation> = HashMap::new();
        for path in safetensors_files(directory)? {
            let (file, _) = crate::files::open_regular_file(&path)?;
            // SAFETY: the mapping is read-only and the checkpoint is assumed
            // not to be modified while a model uses it (as every inference
            // engine that maps weights assumes).
            let map = unsafe { Mmap::map(&file) }.map_err(|source| ModelError::Io {
                path: path.clone(),
                source,
            })?;
            for info in read_safetensors_header(&map, &path)? {
                let location = TensorLocation {
                    file: files.len(),
                    dtype: info.dtype,
                    dtype_name: info.dtype_name,
                    shape: info.shape,
                    offset: info.offset,
                };
                if let Some(earlier) = tensors.get(&info.name) {
                    let earlier: &PathBuf = &files[earlier.file].0;
                    return Err(ModelError::Safetensors {
                        path,
                        problem: format!(
                            "tensor `{}` is also in {}: refusing to pick one",
                            shown(&info.name),
                            earlier.display()
                        ),
                    });
                }
                tensors.insert(info.name, location);
            }
            files.push((path, Arc::new(map)));
        }
        Ok(Checkpoint {
            directory: directory.to_path_buf(),
            files,
            tensors,
        })
    }

    /// The names of every tensor the files hold.
    pub(crate) fn tensor_names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Bytes in all of the checkpoint's files.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|(_, map)| map.len() as u64).sum()
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
                described_by: "config.json",
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

impl Checkpoint {
    /// The name `spec` has in this checkpoint: its own, or for a router
    /// the spelling the files use (Mixtral's Hub files and transformers 5
    /// name it differently).
    pub(crate) fn resolve_name(&self, config: &Config, spec: &TensorSpec) -> String {
        if let TensorRole::Layer {
            index,
            tensor: LayerTensor::Router,
        } = spec.role
        {
            let names = router_names(config.architecture, index, ExpertLayout::PerExpert);
            if let Some(found) = names.iter().find(|name| self.tensors.contains_key(name.as_str())) {
                return found.clone();
            }
        }
        spec.name.clone()
    }

    /// The bytes of layer `layer`'s stacked expert tensor `tensor`
    /// (`[experts, rows, columns]` of `dtype`), gathered from one tensor per
    /// expert or from transformers 5's stacked tensors, whichever the
    /// checkpoint holds; each piece is checked for shape and dtype.
    pub(crate) fn stacked_experts(
        &self,
        config: &Config,
        layer: usize,
        tensor: LayerTensor,
        dtype: DType,
    ) -> Result<Vec<u8>> {
        let per_expert = config.expert_pieces(layer, tensor, ExpertLayout::PerExpert);
        let stacked = config.expert_pieces(layer, tensor, ExpertLayout::Stacked);
        let pieces = match (per_expert.first(), stacked.first()) {
            (Some(first), _) if self.tensors.contains_key(&first.name) => per_expert,
            (_, Some(first)) if self.tensors.contains_key(&first.name) => stacked,
            (Some(first), Some(other)) => {
                return Err(ModelError::TensorMissing {
                    directory: self.directory.clone(),
                    name: format!("{}` (or the stacked `{}", first.name, other.name),
                });
            }
            _ => return Ok(Vec::new()),
        };
        let element = dtype.size_in_bytes();
        let mut bytes = Vec::with_capacity(pieces.iter().map(|piece| piece.length).sum::<usize>() * element);
        for piece in pieces {
            let location = self.locate(&piece.name, &piece.shape, dtype)?;
            let map = &self.files[location.file].1;
            let from = location.offset + piece.start * element;
            bytes.extend_from_slice(&map[from..from + piece.length * element]);
        }
        Ok(bytes)
    }
}
