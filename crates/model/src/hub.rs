//! `org/name` as a model: the snapshot of that repository in the Hugging
//! Face hub cache, found offline (nothing is downloaded). The cache is the
//! one `huggingface_hub` fills: `HF_HUB_CACHE`, else `$HF_HOME/hub`, else
//! `~/.cache/huggingface/hub`; a repository lives in `models--org--name/`,
//! `refs/REVISION` holds the commit of a branch or tag, and
//! `snapshots/COMMIT/` the files (symlinks into `blobs/`).

use std::path::{Path, PathBuf};

use crate::error::{ModelError, Result};

/// A resolved snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubSnapshot {
    /// `.../models--org--name/snapshots/COMMIT`: the model directory.
    pub directory: PathBuf,
    /// `.../models--org--name`: where the snapshot's symlinks may point.
    pub repository_root: PathBuf,
    /// The commit the revision resolved to.
    pub commit: String,
}

/// Whether `text` has the shape of a hub repository id, `org/name`: two
/// non-empty parts of letters, digits, `.`, `_` and `-`, neither `.` nor `..`
/// nor starting with `-` or `.`. (A path that exists is a path: callers
/// check that first.)
pub fn looks_like_repo_id(text: &str) -> bool {
    let mut parts = text.split('/');
    let (Some(organisation), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    [organisation, name].iter().all(|part| {
        !part.is_empty()
            && part.len() <= 96
            && !part.starts_with(['-', '.'])
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    })
}

/// The hub cache folder from the values of `HF_HUB_CACHE`, `HF_HOME` and
/// `HOME` (in that order of precedence), as `huggingface_hub` picks it.
pub fn hub_cache_from(hub_cache: Option<&str>, hf_home: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    let set = |value: Option<&str>| value.filter(|value| !value.is_empty()).map(PathBuf::from);
    set(hub_cache)
        .or_else(|| set(hf_home).map(|home| home.join("hub")))
        .or_else(|| set(home).map(|home| home.join(".cache/huggingface/hub")))
}

/// The hub cache folder of this process's environment.
pub fn hub_cache() -> Option<PathBuf> {
    let variable = |name: &str| std::env::var(name).ok();
    hub_cache_from(
        variable("HF_HUB_CACHE").as_deref(),
        variable("HF_HOME").as_deref(),
        variable("HOME").as_deref(),
    )
}

/// Resolves `repo_id` at `revision` (default `main`) in the environment's hub cache.
pub fn resolve_hub_model(repo_id: &str, revision: Option<&str>) -> Result<HubSnapshot> {
    let cache = hub_cache().ok_or_else(|| ModelError::HubCache {
        repo_id: repo_id.to_string(),
        problem: "no Hugging Face cache folder: set HF_HUB_CACHE, HF_HOME or HOME".into(),
    })?;
    resolve_in_cache(&cache, repo_id, revision)
}

fn is_commit(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|byte| byte.is_ascii_hexdigit())
}

/// A revision usable as a file name under `refs/`: branch and tag names,
/// which may hold `/` (`refs/pr/1`), never `..`, a leading `/` or odd bytes.
fn valid_revision(revision: &str) -> bool {
    !revision.is_empty()
        && revision.len() <= 200
        && !revision.starts_with('/')
        && revision
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
        && revision
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
}

/// Resolves `repo_id` at `revision` (default `main`) in the cache folder `cache`.
pub fn resolve_in_cache(cache: &Path, repo_id: &str, revision: Option<&str>) -> Result<HubSnapshot> {
    let error = |problem: String| ModelError::HubCache {
        repo_id: repo_id.to_string(),
        problem,
    };
    if !looks_like_repo_id(repo_id) {
        return Err(error(
            "not a Hugging Face repository id (expected org/name)".into(),
        ));
    }
    let revision_name = revision.unwrap_or("main");
    if !valid_revision(revision_name) {
        return Err(error(format!(
            "`{revision_name}` is not a revision name (--revision)"
        )));
    }
    let download = match revision {
        Some(revision) => format!("hf download {repo_id} --revision {revision}"),
        None => format!("hf download {repo_id}"),
    };
    let folder = format!("models--{}", repo_id.replace('/', "--"));
    let repository = cache.join(&folder);
    if !repository.is_dir() {
        return Err(error(format!(
            "not in the Hugging Face cache at {} (no {folder} there); download it with: {download}",
            cache.display()
        )));
    }
    let snapshots = repository.join("snapshots");
    let commit = if is_commit(revision_name) {
        revision_name.to_ascii_lowercase()
    } else {
        let reference = repository.join("refs").join(revision_name);
        let bytes = match crate::files::read_regular_file(&reference, 1024) {
            Ok(bytes) => bytes,
            Err(_) => {
                let cached = cached_snapshots(&snapshots);
                return Err(error(format!(
                    "revision `{revision_name}` is not in the cache ({} missing; cached snapshots: {}); download it with: {download}",
                    reference.display(),
                    if cached.is_empty() {
                        "none".to_string()
                    } else {
                        cached.join(", ")
                    }
                )));
            }
        };
        let text = String::from_utf8_lossy(&bytes).trim().to_string();
        if !is_commit(&text) {
            return Err(error(format!(
                "{} does not hold a commit hash (found `{}`)",
                reference.display(),
                text.chars().take(64).collect::<String>()
            )));
        }
        text.to_ascii_lowercase()
    };
    let directory = snapshots.join(&commit);
    if !directory.is_dir() {
        return Err(error(format!(
            "the snapshot of commit {commit} is not in the cache ({} missing); download it with: {download}",
            directory.display()
        )));
    }
    Ok(HubSnapshot {
        directory,
        repository_root: repository,
        commit,
    })
}

/// The commits with a snapshot folder, for error messages.
fn cached_snapshots(snapshots: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(snapshots)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| is_commit(name))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names.truncate(8);
    names
}
