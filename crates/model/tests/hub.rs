//! `org/name` in a Hugging Face hub cache built here: refs, revisions as
//! branch names and as commits, snapshots whose files link into blobs, and
//! the errors that tell a user what to download.

use std::path::{Path, PathBuf};

use kernelscope::rng::SplitMix64;
use kernelscope_model::{hub_cache_from, looks_like_repo_id, resolve_in_cache};

struct Cache(PathBuf);

impl Drop for Cache {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn commit(rng: &mut SplitMix64) -> String {
    (0..40)
        .map(|_| char::from_digit(rng.below(16) as u32, 16).unwrap())
        .collect()
}

/// A cache with `org/tiny` at two commits: `main` and `dev` refs.
fn cache(name: &str) -> (Cache, String, String) {
    let root = std::env::temp_dir().join(format!("kscope-hub-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut rng = SplitMix64::new(name.len() as u64 * 7919);
    let (main, dev) = (commit(&mut rng), commit(&mut rng));
    let repository = root.join("models--org--tiny");
    std::fs::create_dir_all(repository.join("refs")).unwrap();
    std::fs::create_dir_all(repository.join("blobs")).unwrap();
    for hash in [&main, &dev] {
        let snapshot = repository.join("snapshots").join(hash);
        std::fs::create_dir_all(&snapshot).unwrap();
        let blob = repository.join("blobs").join(format!("{hash}-config"));
        std::fs::write(&blob, "{}").unwrap();
        std::os::unix::fs::symlink(
            Path::new("../../blobs").join(blob.file_name().unwrap()),
            snapshot.join("config.json"),
        )
        .unwrap();
    }
    std::fs::write(repository.join("refs/main"), format!("{main}\n")).unwrap();
    std::fs::write(repository.join("refs/dev"), &dev).unwrap();
    (Cache(root), main, dev)
}

#[test]
fn repo_ids_have_the_hub_shape() {
    for good in [
        "meta-llama/Llama-3.2-1B",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "a/b",
        "org_1/name.v2",
    ] {
        assert!(looks_like_repo_id(good), "{good}");
    }
    for bad in [
        "llama",
        "a/b/c",
        "/abs/path",
        "../x",
        "org/..",
        "org/.hidden",
        "-org/x",
        "org/",
        "o rg/x",
        "",
    ] {
        assert!(!looks_like_repo_id(bad), "{bad}");
    }
}

#[test]
fn the_cache_folder_follows_huggingface_hub_precedence() {
    assert_eq!(
        hub_cache_from(Some("/c"), Some("/h"), Some("/home")),
        Some(PathBuf::from("/c"))
    );
    assert_eq!(
        hub_cache_from(None, Some("/h"), Some("/home")),
        Some(PathBuf::from("/h/hub"))
    );
    assert_eq!(
        hub_cache_from(Some(""), None, Some("/home")),
        Some(PathBuf::from("/home/.cache/huggingface/hub"))
    );
    assert_eq!(hub_cache_from(None, None, None), None);
}

#[test]
fn refs_branches_and_commits_resolve_to_snapshots() {
    let (cache, main, dev) = cache("resolve");
    let snapshot = resolve_in_cache(&cache.0, "org/tiny", None).unwrap();
    assert_eq!(snapshot.commit, main);
    assert_eq!(
        snapshot.directory,
        cache.0.join("models--org--tiny/snapshots").join(&main)
    );
    assert_eq!(snapshot.repository_root, cache.0.join("models--org--tiny"));
    assert_eq!(
        std::fs::read_to_string(snapshot.directory.join("config.json")).unwrap(),
        "{}"
    );
    assert_eq!(
        resolve_in_cache(&cache.0, "org/tiny", Some("dev"))
            .unwrap()
            .commit,
        dev
    );
    assert_eq!(
        resolve_in_cache(&cache.0, "org/tiny", Some(&dev)).unwrap().commit,
        dev
    );
}

#[test]
fn what_is_not_cached_says_how_to_download_it() {
    let (cache, main, _) = cache("missing");
    let error = resolve_in_cache(&cache.0, "org/other", None)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("org/other") && error.contains("hf download org/other"),
        "{error}"
    );
    let error = resolve_in_cache(&cache.0, "org/tiny", Some("v2"))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("hf download org/tiny --revision v2") && error.contains(&main),
        "{error}"
    );
    let absent = "0123456789abcdef0123456789abcdef01234567";
    let error = resolve_in_cache(&cache.0, "org/tiny", Some(absent))
        .unwrap_err()
        .to_string();
    assert!(error.contains(absent) && error.contains("hf download"), "{error}");
    // A ref that does not hold a commit.
    std::fs::write(cache.0.join("models--org--tiny/refs/main"), "../../../../etc").unwrap();
    let error = resolve_in_cache(&cache.0, "org/tiny", None)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("refs/main") && error.contains("commit hash"),
        "{error}"
    );
}

#[test]
fn revisions_and_ids_cannot_walk_out_of_the_cache() {
    let (cache, _, _) = cache("traversal");
    for revision in ["../../../etc/passwd", "/etc/passwd", "a/../../b", "main\0", ""] {
        let error = resolve_in_cache(&cache.0, "org/tiny", Some(revision))
            .unwrap_err()
            .to_string();
        assert!(error.contains("not a revision name"), "{revision:?}: {error}");
    }
    for repo in ["../tiny", "org/../../x", "org"] {
        let error = resolve_in_cache(&cache.0, repo, None).unwrap_err().to_string();
        assert!(
            error.contains("not a Hugging Face repository id"),
            "{repo}: {error}"
        );
    }
}
