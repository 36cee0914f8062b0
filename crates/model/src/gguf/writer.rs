//! Writing GGUF files (version 3) without holding tensor data in memory:
//! metadata and tensor infos are declared first, the header is written,
//! then each tensor's bytes are streamed in declaration order, checked
//! against the length its type and dimensions imply and padded to the
//! alignment. Everything goes to a temporary file beside the target, renamed
//! over it only once complete, so a failed or abandoned write leaves no
//! half-written model behind.
//!
//! For the same content the bytes are those of gguf-py's `GGUFWriter`
//! (crates/model/tests/gguf_file.rs rewrites gguf-py's fixtures and compares
//! them byte for byte), except that `general.alignment` is written only
//! when it is not the default 32, where gguf-py writes whatever
//! `add_custom_alignment` was given.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{ModelError, Result, shown};

use super::constants::{DEFAULT_ALIGNMENT, KEY_ALIGNMENT, MAX_DIMS, MAX_TENSOR_NAME_BYTES};
use super::encode::write_header_to;
use super::output::{PlannedTensor, Sink};
use super::types::TensorType;
use super::value::Value;

/// The first stage of writing a GGUF file: the metadata and the tensors it
/// will hold, in order. [`GgufWriter::write_header`] starts the file.
#[derive(Debug)]
pub struct GgufWriter {
    path: PathBuf,
    alignment: Option<u32>,
    metadata: Vec<(String, Value)>,
    keys: HashSet<String>,
    tensors: Vec<PlannedTensor>,
    tensor_names: HashSet<String>,
}

impl GgufWriter {
    /// A writer for the file at `path` (written when complete, replacing
    /// any file there).
    pub fn new(path: impl AsRef<Path>) -> GgufWriter {
        GgufWriter {
            path: path.as_ref().to_path_buf(),
            alignment: None,
            metadata: Vec::new(),
            keys: HashSet::new(),
            tensors: Vec::new(),
            tensor_names: HashSet::new(),
        }
    }

    fn error(&self, problem: String) -> ModelError {
        ModelError::Gguf {
            path: self.path.clone(),
            problem,
        }
    }

    /// Aligns the tensor data to `alignment` bytes (a power of two; 32 when
    /// never set). Other than 32, it is written as `general.alignment` at
    /// this point in the metadata's order.
    pub fn set_alignment(&mut self, alignment: u32) -> Result<()> {
        if self.alignment.is_some() {
            return Err(self.error("the alignment is already set".into()));
        }
        if !alignment.is_power_of_two() {
            return Err(self.error(format!("alignment {alignment} is not a power of two")));
        }
        self.alignment = Some(alignment);
        if alignment != DEFAULT_ALIGNMENT {
            self.keys.insert(KEY_ALIGNMENT.to_string());
            self.metadata
                .push((KEY_ALIGNMENT.to_string(), Value::U32(alignment)));
        }
        Ok(())
    }

    fn alignment(&self) -> u32 {
        self.alignment.unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// Adds a metadata entry after those added before. Keys must be unique
    /// and not empty; `general.alignment` is set with
    /// [`GgufWriter::set_alignment`].
    pub fn add_metadata(&mut self, key: &str, value: impl Into<Value>) -> Result<()> {
        if key.is_empty() {
            return Err(self.error("a metadata key may not be empty".into()));
        }
        if key == KEY_ALIGNMENT {
            return Err(self.error(format!(
                "metadata key `{KEY_ALIGNMENT}` is set with set_alignment, which lays the data out by it"
            )));
        }
        if !self.keys.insert(key.to_string()) {
            return Err(self.error(format!("metadata key `{}` is added twice", shown(key))));
        }
        self.metadata.push((key.to_string(), value.into()));
        Ok(())
    }

    /// Declares the next tensor: `dims` in ggml's order (`dims[0]` is a
    /// row's length, a whole number of the type's blocks). Returns the byte
    /// length its data must have.
    pub fn add_tensor_info(&mut self, name: &str, dims: &[u64], tensor_type: TensorType) -> Result<u64> {
        let tensor = shown(name);
        if name.is_empty() {
            return Err(self.error("a tensor name may not be empty".into()));
        }
        if name.len() > MAX_TENSOR_NAME_BYTES {
            return Err(self.error(format!(
                "tensor `{tensor}` has a name of {} bytes; ggml allows at most {MAX_TENSOR_NAME_BYTES}",
                name.len()
            )));
        }
        if self.tensor_names.contains(name) {
            return Err(self.error(format!("tensor `{tensor}` is declared twice")));
        }
        if dims.len() > MAX_DIMS {
            return Err(self.error(format!(
                "tensor `{tensor}` has {} dimensions; ggml allows at most {MAX_DIMS}",
                dims.len()
            )));
        }
        let elements = dims
            .iter()
            .try_fold(1u64, |product, &dim| product.checked_mul(dim))
            .filter(|&elements| elements <= i64::MAX as u64 && dims.iter().all(|&dim| dim <= i64::MAX as u64))
            .ok_or_else(|| {
                self.error(format!(
                    "tensor `{tensor}`: dimensions {dims:?} overflow ggml's int64"
                ))
            })?;
        let row = dims.first().copied().unwrap_or(1);
        if !row.is_multiple_of(tensor_type.block_elements() as u64) {
            return Err(self.error(format!(
                "tensor `{tensor}` is {tensor_type}, stored in blocks of {} elements, but its rows (dimension 0) have {row}",
                tensor_type.block_elements()
            )));
        }
        let byte_len = tensor_type
            .byte_len(elements)
            .ok_or_else(|| self.error(format!("tensor `{tensor}`: its byte length overflows")))?;
        self.tensor_names.insert(name.to_string());
        self.tensors.push(PlannedTensor {
            name: name.to_string(),
            dims: dims.to_vec(),
            tensor_type,
            byte_len,
        });
        Ok(byte_len)
    }

    /// Writes the header (metadata, tensor infos, padding) to a temporary
    /// file beside the target, and returns the writer that takes the
    /// tensors' bytes.
    pub fn write_header(self) -> Result<GgufTensorWriter> {
        let alignment = u64::from(self.alignment());
        let mut offsets = Vec::with_capacity(self.tensors.len());
        let mut data_len: u64 = 0;
        for tensor in &self.tensors {
            offsets.push(data_len);
            data_len = tensor
                .byte_len
                .checked_next_multiple_of(alignment)
                .and_then(|padded| data_len.checked_add(padded))
                .ok_or_else(|| self.error("the tensor data's length overflows".into()))?;
        }
        let temporary = temporary_beside(&self.path);
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&temporary)
            .map_err(|source| ModelError::Io {
                path: self.path.clone(),
                source,
            })?;
        let mut sink = Sink {
            out: BufWriter::with_capacity(1 << 20, file),
            written: 0,
        };
        if let Err(source) = write_header_to(&mut sink, &self.metadata, &self.tensors, &offsets, alignment) {
            drop(sink);
            let _ = std::fs::remove_file(&temporary);
            return Err(ModelError::Io {
                path: self.path,
                source,
            });
        }
        Ok(GgufTensorWriter {
            path: self.path,
            temporary,
            sink: Some(sink),
            tensors: self.tensors,
            next: 0,
            alignment,
            failed: false,
        })
    }
}

/// The second stage of writing a GGUF file: each declared tensor's bytes,
/// in declaration order, then [`GgufTensorWriter::finish`]. Dropped before
/// `finish`, it deletes the temporary file and leaves the target untouched.
#[derive(Debug)]
pub struct GgufTensorWriter {
    path: PathBuf,
    temporary: PathBuf,
    sink: Option<Sink>,
    tensors: Vec<PlannedTensor>,
    next: usize,
    alignment: u64,
    failed: bool,
}

/// What a tensor's callback writes into: the file, up to the tensor's
/// length and no further (a byte past it would shift every later tensor).
struct TensorSink<'a> {
    sink: &'a mut Sink,
    left: u64,
    overflowed: bool,
}

impl Write for TensorSink<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if bytes.len() as u64 > self.left {
            self.overflowed = true;
            return Err(std::io::Error::other("more bytes than the tensor's length"));
        }
        self.sink.put(bytes)?;
        self.left -= bytes.len() as u64;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.sink.out.flush()
    }
}

impl GgufTensorWriter {
    fn error(&self, problem: String) -> ModelError {
        ModelError::Gguf {
            path: self.path.clone(),
            problem,
        }
    }

    /// Runs `write` on the file; an I/O error names the file the user asked
    /// for (not the temporary one it goes to first) and
    /// stops the writer.
    fn io(&mut self, write: impl FnOnce(&mut Sink) -> std::io::Result<()>) -> Result<()> {
        let sink = self.sink.as_mut().expect("the file is open until finish");
        write(sink).map_err(|source| {
            self.failed = true;
            ModelError::Io {
                path: self.path.clone(),
                source,
            }
        })
    }

    /// The tensor whose bytes come next: its name and byte length.
    pub fn next_tensor(&self) -> Option<(&str, u64)> {
        self.tensors
            .get(self.next)
            .map(|tensor| (tensor.name.as_str(), tensor.byte_len))
    }

    fn next_planned(&self) -> Result<PlannedTensor> {
        if self.failed {
            return Err(self.error("an earlier write failed; the file was not written".into()));
        }
        if STOP.load(Ordering::Relaxed) {
            return Err(ModelError::Interrupted {
                path: self.path.clone(),
            });
        }
        self.tensors.get(self.next).cloned().ok_or_else(|| {
            self.error(format!(
                "every declared tensor ({}) is already written",
                self.tensors.len()
            ))
        })
    }

    /// Writes the next tensor's bytes, which must be exactly its length.
    pub fn write_tensor(&mut self, bytes: &[u8]) -> Result<()> {
        let tensor = self.next_planned()?;
        if bytes.len() as u64 != tensor.byte_len {
            self.failed = true;
            return Err(self.error(format!(
                "tensor `{}` ({} {:?}) takes {} bytes, given {}",
                shown(&tensor.name),
                tensor.tensor_type,
                tensor.dims,
                tensor.byte_len,
                bytes.len()
            )));
        }
        self.write_tensor_with(|out| out.write_all(bytes))
    }

    /// Writes the next tensor's bytes by handing `write` the file to write
    /// them into (streamed: a converter can produce a tensor in pieces). It
    /// must write exactly the tensor's length.
    pub fn write_tensor_with(
        &mut self,
        write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<()> {
        let tensor = self.next_planned()?;
        let alignment = self.alignment;
        let sink = self.sink.as_mut().expect("the file is open until finish");
        let mut out = TensorSink {
            sink,
            left: tensor.byte_len,
            overflowed: false,
        };
        let result = write(&mut out);
        let (left, overflowed) = (out.left, out.overflowed);
        let written = tensor.byte_len - left;
        if overflowed || (result.is_ok() && left > 0) {
            self.failed = true;
            return Err(self.error(format!(
                "tensor `{}` takes {} bytes, but its writer gave {}",
                shown(&tensor.name),
                tensor.byte_len,
                if overflowed {
                    "more".to_string()
                } else {
                    written.to_string()
                }
            )));
        }
        if let Err(source) = result {
            self.failed = true;
            return Err(ModelError::Io {
                path: self.path.clone(),
                source,
            });
        }
        self.io(|sink| sink.pad(alignment))?;
        self.next += 1;
        Ok(())
    }

    /// Checks every declared tensor was written, flushes the file to disk
    /// and renames it over the target.
    pub fn finish(mut self) -> Result<()> {
        if self.failed {
            return Err(self.error("an earlier write failed; the file was not written".into()));
        }
        if let Some(missing) = self.tensors.get(self.next) {
            return Err(self.error(format!(
                "tensor `{}` and {} after it were declared but never written",
                shown(&missing.name),
                self.tensors.len() - self.next - 1
            )));
        }
        let sink = self.sink.take().expect("the file is open until finish");
        let io_error = |source: std::io::Error| ModelError::Io {
            path: self.path.clone(),
            source,
        };
        let file = sink
            .out
            .into_inner()
            .map_err(|error| io_error(error.into_error()))?;
        file.sync_all().map_err(io_error)?;
        drop(file);
        std::fs::rename(&self.temporary, &self.path).map_err(|source| ModelError::Io {
            path: self.path.clone(),
            source,
        })?;
        Ok(())
    }
}

impl Drop for GgufTensorWriter {
    fn drop(&mut self) {
        // After a successful finish the temporary name no longer exists;
        // otherwise the incomplete file must not stay behind.
        drop(self.sink.take());
        let _ = std::fs::remove_file(&self.temporary);
    }
}

/// A hidden name in the target's folder (so the rename is atomic), unique
/// per process and writer.
/// Set by [`stop_writing`]: every GGUF writer stops before its next
/// tensor, and its temporary file is deleted when it is dropped.
static STOP: AtomicBool = AtomicBool::new(false);

/// Asks every GGUF file being written to stop before its next tensor
/// (a program's SIGINT or SIGTERM handler calls it: a store to an atomic
/// is all it does, which is safe in a signal handler).
pub fn stop_writing() {
    STOP.store(true, Ordering::Relaxed);
}

fn temporary_beside(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model.gguf".into());
    let serial = NEXT.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.kscope-{}-{serial}.tmp", std::process::id()))
}
