//! Files `kscope` writes on the user's behalf (`--logits-out`,
//! `--profile-json`, `--trace`). Nothing that exists is replaced without
//! `--force`, a model directory's own files never are, and a file is written
//! whole or not at all (a temporary file beside it, then a rename), so an
//! interrupted run leaves no half-written output.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// One output file, checked before the work that produces it.
#[derive(Debug, Clone)]
pub struct OutputFile {
    path: PathBuf,
    flag: &'static str,
    force: bool,
    protected: Option<PathBuf>,
    overwrite_flag: &'static str,
}

impl OutputFile {
    /// Checks that `path` (given with `flag`) may be written: it does not
    /// exist (or `force` is set and it is a plain file), it is not a file of
    /// `protected` (the model directory), and its folder exists.
    pub fn check(
        path: &Path,
        flag: &'static str,
        force: bool,
        protected: Option<&Path>,
    ) -> Result<OutputFile> {
        Self::check_with(path, flag, force, protected, "--force")
    }

    /// [`check`](Self::check) for a command whose flag to overwrite is
    /// `overwrite_flag` (named in the refusal).
    pub fn check_with(
        path: &Path,
        flag: &'static str,
        force: bool,
        protected: Option<&Path>,
        overwrite_flag: &'static str,
    ) -> Result<OutputFile> {
        let shown = path.display();
        let parent = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if path.file_name().is_none() {
            bail!("{flag} {shown}: not a file name");
        }
        let folder = parent
            .canonicalize()
            .with_context(|| format!("{flag} {shown}: its folder {} is not there", parent.display()))?;
        if !folder.is_dir() {
            bail!("{flag} {shown}: {} is not a folder", parent.display());
        }
        if let Ok(metadata) = std::fs::symlink_metadata(path) {
            if let Some(model) = protected.and_then(|model| model.canonicalize().ok())
                && (folder.starts_with(&model)
                    || path.canonicalize().is_ok_and(|target| target.starts_with(&model)))
            {
                bail!(
                    "{flag} {shown}: a file of the model directory {}; write the output elsewhere",
                    model.display()
                );
            }
            if metadata.file_type().is_symlink() {
                bail!("{flag} {shown}: a symbolic link; refusing to write through it");
            }
            if !metadata.is_file() {
                bail!("{flag} {shown}: exists and is not a regular file");
            }
            if !force {
                bail!("{flag} {shown}: the file exists; pass {overwrite_flag} to overwrite it");
            }
        }
        Ok(OutputFile {
            path: path.to_path_buf(),
            flag,
            force,
            protected: protected.map(Path::to_path_buf),
            overwrite_flag,
        })
    }

    /// Writes `bytes` whole: into a temporary file in the same folder, then
    /// renamed over the target.
    pub fn write(&self, bytes: &[u8]) -> Result<()> {
        self.write_with(|file| file.write_all(bytes))
    }

    /// Writes what `produce` writes, as [`write`](Self::write) does, without
    /// holding it in memory first (a trace of a million kernels).
    pub fn write_with(&self, produce: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
        // Again: something may have appeared there while the model ran.
        Self::check_with(
            &self.path,
            self.flag,
            self.force,
            self.protected.as_deref(),
            self.overwrite_flag,
        )?;
        let shown = self.path.display();
        let name = self.path.file_name().expect("checked").to_string_lossy();
        let temporary = self
            .path
            .with_file_name(format!(".{name}.kscope-{}.tmp", std::process::id()));
        let written = (|| -> std::io::Result<()> {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&temporary)?;
            let mut buffered = std::io::BufWriter::new(file);
            produce(&mut buffered)?;
            let file = buffered.into_inner().map_err(|error| error.into_error())?;
            file.sync_all()?;
            std::fs::rename(&temporary, &self.path)
        })();
        if let Err(error) = written {
            let _ = std::fs::remove_file(&temporary);
            bail!("{} {shown}: {error}", self.flag);
        }
        Ok(())
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
