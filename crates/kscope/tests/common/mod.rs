//! What the CLI tests share: running the built `kscope` and writing a
//! synthetic checkpoint with it. (Each test file uses part of it.)
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The binary cargo built, or `kscope` on PATH where tests run from a bundle
/// on another machine (the GPU machine's `.gpu/run.sh` puts it there).
pub fn kscope_binary() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_kscope"));
    if built.exists() {
        built
    } else {
        PathBuf::from("kscope")
    }
}

/// Runs `kscope args` with `environment` added: (exit code, stdout, stderr).
pub fn kscope_with(args: &[&str], environment: &[(&str, &Path)]) -> (i32, String, String) {
    let mut command = Command::new(kscope_binary());
    command.args(args);
    for (name, value) in environment {
        command.env(name, value);
    }
    let output = command.output().unwrap();
    (
        output.status.code().expect("exited normally"),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// Runs `kscope args`: (exit code, stdout, stderr).
pub fn kscope(args: &[&str]) -> (i32, String, String) {
    kscope_with(args, &[])
}

/// Writes preset `preset` with weights of `seed` to `directory` (quietly),
/// failing the test if gen-model fails.
pub fn gen_model(preset: &str, seed: u64, directory: &Path) {
    let seed = seed.to_string();
    let (code, _, stderr) = kscope(&[
        "gen-model",
        "--preset",
        preset,
        "--seed",
        &seed,
        "--quiet",
        "--out",
        directory.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
}

/// Runs `kscope args` and expects exit 2 with one `error: ` line holding every needle.
pub fn expect_failure(args: &[&str], needles: &[&str]) {
    let (code, stdout, stderr) = kscope(args);
    assert_eq!(code, 2, "args {args:?}\nstdout: {stdout}\nstderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "missing `{needle}` in: {stderr}");
    }
}

/// The injection library beside the kscope binary (cargo's target folder,
/// or the GPU bundle's bin folder, found through PATH), or beside the test.
pub fn injection_library() -> PathBuf {
    const NAME: &str = "libkscope_inject.so";
    let binary = kscope_binary();
    // Beside kscope (`cargo build`) and beside the test binaries in deps/ (`cargo test
    // --workspace` builds it there for its doctests): the newer of the two, since the other
    // may be left from an earlier build.
    let built = [
        binary.parent().map(PathBuf::from),
        std::env::current_exe()
            .ok()
            .and_then(|test| test.parent().map(PathBuf::from)),
    ]
    .into_iter()
    .flatten()
    .map(|folder| folder.join(NAME))
    .filter_map(|candidate| Some((std::fs::metadata(&candidate).ok()?.modified().ok()?, candidate)))
    .max()
    .map(|(_, newest)| newest);
    let on_path = || {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|folder| folder.join(NAME))
            .find(|candidate| candidate.is_file())
    };
    built.or_else(on_path).unwrap_or_else(|| {
        panic!(
            "{NAME} is neither beside {} nor the test nor on PATH: run cargo test --workspace, or cargo build -p kernelscope-inject",
            binary.display()
        )
    })
}

/// A scratch folder of a test's own (`kscope-cli-NAME-PID` in the temporary
/// folder), removed when dropped.
pub struct ScratchFolder(pub PathBuf);

impl ScratchFolder {
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("kscope-cli-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        ScratchFolder(dir)
    }

    /// Writes `contents` to the file `name` in the folder; its path.
    pub fn file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for ScratchFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes preset `preset` as a GGUF file of type `quant` at `path`
/// (quietly), failing the test if gen-model fails.
pub fn gen_gguf(preset: &str, quant: &str, path: &Path) {
    let (code, _, stderr) = kscope(&[
        "gen-model",
        "--preset",
        preset,
        "--quant",
        quant,
        "--quiet",
        "--out",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
}
