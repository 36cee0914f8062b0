//! Reading a model directory's files as untrusted input: only regular files
//! (a FIFO would block the read forever, a device never end), of bounded
//! size, and, for files a checkpoint names itself, only inside the model's
//! own directory tree.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use crate::error::{ModelError, Result, shown};

/// What a path is, for errors: "a directory", "a FIFO", ...
pub(crate) fn kind_of(metadata: &std::fs::Metadata) -> &'static str {
    let kind = metadata.file_type();
    if kind.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_socket() {
            return "a socket";
        }
        if kind.is_block_device() || kind.is_char_device() {
            return "a device";
        }
    }
    if kind.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// `metadata` (of `path`) when it is a regular file's, else the error naming what it is.
fn regular(path: &Path, metadata: std::io::Result<std::fs::Metadata>) -> Result<std::fs::Metadata> {
    let metadata = metadata.map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if !metadata.is_file() {
        return Err(ModelError::NotRegularFile {
            path: path.to_path_buf(),
            kind: kind_of(&metadata),
        });
    }
    Ok(metadata)
}

/// Opens `path` for reading after checking it is a regular file (symlinks
/// followed; opening a FIFO would block), and checks again on the open
/// handle (the path could have been swapped in between).
pub(crate) fn open_regular_file(path: &Path) -> Result<(std::fs::File, u64)> {
    regular(path, std::fs::metadata(path))?;
    let file = std::fs::File::open(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let metadata = regular(path, file.metadata())?;
    Ok((file, metadata.len()))
}

/// The bytes of the regular file at `path`, refused above `limit` bytes.
pub(crate) fn read_regular_file(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let (file, length) = open_regular_file(path)?;
    let too_large = |size: u64| ModelError::FileTooLarge {
        path: path.to_path_buf(),
        size,
        limit,
    };
    if length > limit {
        return Err(too_large(length));
    }
    let mut bytes = Vec::with_capacity(length as usize);
    // One byte past the limit tells a file that grew while being read.
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// `name` (a file name from a checkpoint's index) joined to `directory`,
/// refused unless it is a relative path without `..` whose target, after
/// resolving symlinks, lies inside `root` (the model directory, or for a
/// Hugging Face cache snapshot the repository's cache folder, whose
/// snapshot files are symlinks into its `blobs/`).
pub(crate) fn contained_path(directory: &Path, root: &Path, name: &str, named_by: &Path) -> Result<PathBuf> {
    let escape = |problem: String| ModelError::PathEscape {
        path: named_by.to_path_buf(),
        name: shown(name),
        problem,
    };
    let relative = Path::new(name);
    if name.is_empty() || name.contains('\0') {
        return Err(escape("an empty name or one with a NUL byte".into()));
    }
    for component in relative.components() {
        match component {
            Component::Normal(_) => {}
            Component::CurDir => {}
            Component::ParentDir => return Err(escape("`..` leaves the model directory".into())),
            Component::RootDir | Component::Prefix(_) => {
                return Err(escape(
                    "an absolute path; shards must be inside the model directory".into(),
                ));
            }
        }
    }
    let joined = directory.join(relative);
    let resolved = joined.canonicalize().map_err(|source| ModelError::Io {
        path: joined.clone(),
        source,
    })?;
    let root = root.canonicalize().map_err(|source| ModelError::Io {
        path: root.to_path_buf(),
        source,
    })?;
    if !resolved.starts_with(&root) {
        return Err(escape(format!(
            "it resolves to {}, outside {} (shards must live in the model directory: copy or move it there)",
            resolved.display(),
            root.display()
        )));
    }
    Ok(joined)
}
