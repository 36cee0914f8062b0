//! Resolves an `org/name` repo id to a model directory in the local Hugging
//! Face hub cache, without the network: `kscope run org/name` should work
//! on whatever `hf download org/name` already fetched, and say how to fetch
//! it when nothing is there.
//!
//! The cache layout (huggingface_hub's) is
//! `<cache>/models--{org}--{name}/refs/{revision}` holding a commit hash, and
//! `<cache>/models--{org}--{name}/snapshots/{commit}/` holding the files,
//! usually as symlinks into `../../blobs/`.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{ModelError, Result, shown};

/// One snapshot of a model repo in the hub cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubSnapshot {
    /// The model directory: `<cache>/models--{org}--{name}/snapshots/{commit}`.
    pub directory: PathBuf,
    /// The repo's folder, `<cache>/models--{org}--{name}`: the snapshot's
    /// symlinks resolve inside it (into `blobs/`).
    pub repo_root: PathBuf,
    /// The commit hash the snapshot is of.
    pub commit: String,
}

/// The environment variables that place the hub cache, as values, so that
/// the lookup is a pure function tests can call without touching the
/// process environment (tests run in parallel).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HubCacheEnvironment {
    /// `HF_HUB_CACHE`: the cache directory itself.
    pub hf_hub_cache: Option<OsString>,
    /// `HUGGINGFACE_HUB_CACHE`: the older name of `HF_HUB_CACHE`.
    pub huggingface_hub_cache: Option<OsString>,
    /// `HF_HOME`: the cache is `$HF_HOME/hub`.
    pub hf_home: Option<OsString>,
    /// `XDG_CACHE_HOME`: the cache is `$XDG_CACHE_HOME/huggingface/hub`.
    pub xdg_cache_home: Option<OsString>,
    /// `HOME`: the cache is `~/.cache/huggingface/hub`.
    pub home: Option<OsString>,
}

impl HubCacheEnvironment {
    /// The variables as this process has them.
    pub fn from_process() -> HubCacheEnvironment {
        HubCacheEnvironment {
            hf_hub_cache: std::env::var_os("HF_HUB_CACHE"),
            huggingface_hub_cache: std::env::var_os("HUGGINGFACE_HUB_CACHE"),
            hf_home: std::env::var_os("HF_HOME"),
            xdg_cache_home: std::env::var_os("XDG_CACHE_HOME"),
            home: std::env::var_os("HOME"),
        }
    }

    /// The cache directory, in huggingface_hub's order of precedence:
    /// `HF_HUB_CACHE`, `HUGGINGFACE_HUB_CACHE`, `$HF_HOME/hub`,
    /// `$XDG_CACHE_HOME/huggingface/hub`, `$HOME/.cache/huggingface/hub`.
    /// Empty values count as unset; a leading `~` is expanded with `HOME`
    /// as Python's `expanduser` does. `None` when nothing places it.
    pub fn cache_directory(&self) -> Option<PathBuf> {
        fn set(value: &Option<OsString>) -> Option<&OsString> {
            value.as_ref().filter(|value| !value.is_empty())
        }
        let home = set(&self.home).map(PathBuf::from);
        let expand = |value: &OsString| -> PathBuf {
            let path = PathBuf::from(value);
            match (&home, path.strip_prefix("~")) {
                (Some(home), Ok(rest)) => home.join(rest),
                _ => path,
            }
        };
        if let Some(cache) = set(&self.hf_hub_cache).or(set(&self.huggingface_hub_cache)) {
            return Some(expand(cache));
        }
        if let Some(hf_home) = set(&self.hf_home) {
            return Some(expand(hf_home).join("hub"));
        }
        if let Some(xdg_cache_home) = set(&self.xdg_cache_home) {
            return Some(expand(xdg_cache_home).join("huggingface").join("hub"));
        }
        home.map(|home| home.join(".cache").join("huggingface").join("hub"))
    }
}

/// Whether `text` has the shape of a hub repo id, `org/name`: exactly one
/// `/`, both parts non-empty, made of ASCII letters, digits, `.`, `_` and
/// `-`, neither `.` nor `..` nor starting with `-`. A path that exists on
/// disk should be taken as a path first; the caller checks that.
pub fn looks_like_repo_id(text: &str) -> bool {
    let mut parts = text.split('/');
    let (Some(organization), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    [organization, name].iter().all(|part| {
        !part.is_empty()
            && *part != "."
            && *part != ".."
            && !part.starts_with('-')
            && part
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
    })
}

/// Resolves `repo_id` (`org/name`) at `revision` (a branch, a tag or a
/// commit hash; `main` when `None`) in the hub cache this process's
/// environment names. Nothing is downloaded.
pub fn resolve_hub_model(repo_id: &str, revision: Option<&str>) -> Result<HubSnapshot> {
    let Some(cache) = HubCacheEnvironment::from_process().cache_directory() else {
        return Err(hub_error(
            repo_id,
            "cannot locate the Hugging Face cache: none of HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME, HOME is set"
                .to_string(),
        ));
    };
    resolve_in_cache(&cache, repo_id, revision)
}

/// [`resolve_hub_model`] in the cache directory `cache` (the folder holding
/// `models--*`).
pub fn resolve_in_cache(cache: &Path, repo_id: &str, revision: Option<&str>) -> Result<HubSnapshot> {
    if !looks_like_repo_id(repo_id) {
        // Quoted, so that an empty or odd id still reads as the id.
        return Err(hub_error(
            &format!("`{repo_id}`"),
            "not a Hugging Face repo id (expected org/name: one `/`, letters, digits, `.`, `_`, `-`)"
                .to_string(),
        ));
    }
    if let Some(revision) = revision {
        check_revision(revision).map_err(|problem| hub_error(repo_id, problem))?;
    }
    let download = download_command(repo_id, revision);
    let folder = format!("models--{}", repo_id.replace('/', "--"));
    let repo_root = cache.join(&folder);
    if !repo_root.is_dir() {
        let why = if cache.is_dir() {
            format!("no {folder} there")
        } else {
            "no such directory".to_string()
        };
        return Err(hub_error(
            repo_id,
            format!(
                "not in the Hugging Face cache at {} ({why}); download it with: {download}",
                cache.display()
            ),
        ));
    }
    let revision_name = revision.unwrap_or("main");
    let commit = if is_commit_hash(revision_name) {
        revision_name.to_string()
    } else {
        read_ref(&repo_root, repo_id, revision_name, &download)?
    };
    let directory = repo_root.join("snapshots").join(&commit);
    if !directory.is_dir() {
        let named_by = if commit == revision_name {
            format!("revision {commit} is not cached")
        } else {
            format!("refs/{revision_name} names commit {commit} but snapshots/{commit} is missing")
        };
        return Err(hub_error(
            repo_id,
            format!(
                "{named_by} in {} ({}); download it with: {download}",
                repo_root.display(),
                cached_revisions(&repo_root)
            ),
        ));
    }
    Ok(HubSnapshot {
        directory,
        repo_root,
        commit,
    })
}

/// The commit hash that `refs/{revision}` holds.
fn read_ref(repo_root: &Path, repo_id: &str, revision: &str, download: &str) -> Result<String> {
    let path = repo_root.join("refs").join(revision);
    if std::fs::symlink_metadata(&path).is_err() {
        return Err(hub_error(
            repo_id,
            format!(
                "no refs/{revision} in {} ({}); pass a cached revision or download it with: {download}",
                repo_root.display(),
                cached_revisions(repo_root)
            ),
        ));
    }
    // Only a regular file: opening a FIFO would block.
    let (file, _) = crate::files::open_regular_file(&path)?;
    // A ref holds one hash; reading a bounded prefix keeps a huge or
    // special file from being slurped whole.
    let mut bytes = Vec::new();
    file.take(1024)
        .read_to_end(&mut bytes)
        .map_err(|source| ModelError::Io {
            path: path.clone(),
            source,
        })?;
    let text = String::from_utf8_lossy(&bytes);
    let commit = text.trim();
    if !is_commit_hash(commit) {
        return Err(hub_error(
            repo_id,
            format!(
                "{} holds `{}`, not a commit hash (expected 40 or 64 lowercase hex digits)",
                path.display(),
                shown(commit)
            ),
        ));
    }
    Ok(commit.to_string())
}

/// A git commit hash as the hub writes it: 40 (SHA-1) or 64 (SHA-256)
/// lowercase hex digits.
fn is_commit_hash(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
}

/// Refuses revisions that would leave `refs/`: the revision becomes a path
/// under it, and branch names may hold `/` (`refs/pr/1`), so each component
/// is checked.
fn check_revision(revision: &str) -> std::result::Result<(), String> {
    let refuse = |why: &str| Err(format!("revision `{}` is not usable: {why}", shown(revision)));
    if revision.is_empty() {
        return refuse("it is empty");
    }
    if revision.len() > 255 {
        return refuse("it is longer than 255 bytes");
    }
    if revision.chars().any(|character| character.is_control()) {
        return refuse("it holds a control character");
    }
    if revision.contains('\\') {
        return refuse("it holds a backslash");
    }
    if revision.starts_with('/') {
        return refuse("it starts with `/`");
    }
    if revision
        .split('/')
        .any(|component| matches!(component, "" | "." | ".."))
    {
        return refuse("it holds an empty, `.` or `..` path component");
    }
    Ok(())
}

/// The `hf` command that downloads what was asked for.
fn download_command(repo_id: &str, revision: Option<&str>) -> String {
    match revision {
        Some(revision) => format!("hf download {repo_id} --revision {revision}"),
        None => format!("hf download {repo_id}"),
    }
}

/// What the repo folder has cached, for error messages: its refs and its
/// snapshots (first 12 hex digits), a few of each.
fn cached_revisions(repo_root: &Path) -> String {
    const SHOWN: usize = 8;
    let mut refs = Vec::new();
    collect_refs(&repo_root.join("refs"), "", 0, &mut refs);
    refs.sort();
    let mut snapshots: Vec<String> = std::fs::read_dir(repo_root.join("snapshots"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.path().is_dir())
        .map(|entry| entry.file_name().to_string_lossy().chars().take(12).collect())
        .collect();
    snapshots.sort();
    let list = |names: &[String]| {
        let mut text = names.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
        if names.len() > SHOWN {
            text.push_str(&format!(" and {} more", names.len() - SHOWN));
        }
        text
    };
    match (refs.is_empty(), snapshots.is_empty()) {
        (true, true) => "nothing cached".to_string(),
        (false, true) => format!("cached refs: {}; no snapshots", list(&refs)),
        (true, false) => format!("no refs; cached snapshots: {}", list(&snapshots)),
        (false, false) => format!("cached refs: {}; snapshots: {}", list(&refs), list(&snapshots)),
    }
}

/// Ref names under `folder`, nested ones (`refs/pr/1`) joined with `/`;
/// the depth bound keeps a symlink loop from recursing forever.
fn collect_refs(folder: &Path, prefix: &str, depth: usize, names: &mut Vec<String>) {
    if depth > 4 || names.len() > 100 {
        return;
    }
    for entry in std::fs::read_dir(folder).into_iter().flatten().flatten() {
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        let path = entry.path();
        if path.is_dir() {
            collect_refs(&path, &format!("{name}/"), depth + 1, names);
        } else {
            names.push(name);
        }
    }
}

/// The error for `repo_id`, escaped so that a newline in what the user
/// typed cannot break the one-line message.
fn hub_error(repo_id: &str, problem: String) -> ModelError {
    ModelError::HubCache {
        repo_id: repo_id.escape_debug().to_string(),
        problem,
    }
}
