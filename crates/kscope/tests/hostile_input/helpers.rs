//! What the hostile-input tests share: a scratch checkpoint, and kscope run expecting a refusal.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{gen_model, kscope};

/// A scratch folder with a fresh tiny checkpoint in `model/`, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        let root = std::env::temp_dir().join(format!("kscope-hostile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        gen_model("tiny", 21, &root.join("model"));
        Scratch(root)
    }

    pub fn model(&self) -> PathBuf {
        self.0.join("model")
    }

    pub fn model_arg(&self) -> String {
        self.model().to_str().unwrap().to_string()
    }

    pub fn config(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.model().join("config.json")).unwrap()).unwrap()
    }

    pub fn set_config(&self, config: &Value) {
        std::fs::write(
            self.model().join("config.json"),
            serde_json::to_string_pretty(config).unwrap(),
        )
        .unwrap();
    }

    /// Sets (or with `Value::Null`... as given) one top-level field.
    pub fn with_field(&self, field: &str, value: Value) {
        let mut config = self.config();
        config[field] = value;
        self.set_config(&config);
    }

    pub fn without_field(&self, field: &str) {
        let mut config = self.config();
        config.as_object_mut().unwrap().remove(field);
        self.set_config(&config);
    }

    /// Every regular file under the scratch folder with its bytes (FIFOs and
    /// other special files by kind only: reading one would block).
    fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut files = BTreeMap::new();
        let mut pending = vec![self.0.clone()];
        while let Some(folder) = pending.pop() {
            for entry in std::fs::read_dir(&folder).unwrap() {
                let path = entry.unwrap().path();
                let metadata = std::fs::symlink_metadata(&path).unwrap();
                if metadata.is_dir() {
                    pending.push(path);
                } else if metadata.is_file() {
                    files.insert(path.clone(), std::fs::read(&path).unwrap());
                } else {
                    files.insert(path.clone(), format!("{:?}", metadata.file_type()).into_bytes());
                }
            }
        }
        files
    }

    /// Runs kscope and expects exit 2, one line holding every needle, and
    /// not one byte changed under the scratch folder.
    pub fn refuses(&self, args: &[&str], needles: &[&str]) {
        let before = self.snapshot();
        refused(args, needles);
        let after = self.snapshot();
        assert_eq!(
            before.keys().collect::<Vec<_>>(),
            after.keys().collect::<Vec<_>>(),
            "files appeared or vanished: {args:?}"
        );
        for (path, bytes) in &before {
            assert!(&after[path] == bytes, "{} changed: {args:?}", path.display());
        }
    }

    /// `kscope run --model DIR` with a few tokens, refused.
    pub fn run_refuses(&self, needles: &[&str]) {
        let model = self.model_arg();
        self.refuses(
            &["run", "--model", &model, "--max-tokens", "2", "--quiet"],
            needles,
        );
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs kscope and expects exit 2 and one `error:` line holding every needle.
pub fn refused(args: &[&str], needles: &[&str]) {
    let (code, stdout, stderr) = kscope(args);
    assert_eq!(code, 2, "args {args:?}\nstdout: {stdout}\nstderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    // No message shows Rust's debug format.
    assert!(!stderr.contains("Some(") && !stderr.contains("_ns: "), "{stderr}");
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "{args:?}: missing `{needle}` in: {stderr}"
        );
    }
}

pub fn make_fifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo exists");
    assert!(status.success());
}
