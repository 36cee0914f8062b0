//! `org/name` resolution in fake Hugging Face hub caches built in temporary
//! directories (snapshot files symlinked into `blobs/`, as the hub writes
//! them): refs, revisions, commit hashes, and the errors for what is
//! missing, malformed or tries to leave the cache.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use kernelscope::rng::SplitMix64;
use kernelscope_model::{
    HubCacheEnvironment, HubSnapshot, ModelError, looks_like_repo_id, resolve_hub_model, resolve_in_cache,
};

/// An empty cache directory unique to this test and process.
fn empty_cache(name: &str) -> PathBuf {
    let cache = std::env::temp_dir().join(format!("kscope-hub-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::create_dir_all(&cache).unwrap();
    cache
}

/// Random lowercase hex of `digits` digits, as a commit or blob hash.
fn random_hash(random: &mut SplitMix64, digits: usize) -> String {
    (0..digits)
        .map(|_| char::from_digit(random.below(16) as u32, 16).unwrap())
        .collect()
}

fn repo_root(cache: &Path, repo_id: &str) -> PathBuf {
    cache.join(format!("models--{}", repo_id.replace('/', "--")))
}

/// Writes snapshot `commit` of `repo_id` holding `files`, each a symlink to
/// `../../blobs/<hash>` as huggingface_hub lays them out.
fn add_snapshot(cache: &Path, repo_id: &str, commit: &str, files: &[(&str, &[u8])], random: &mut SplitMix64) {
    let root = repo_root(cache, repo_id);
    let snapshot = root.join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(root.join("blobs")).unwrap();
    for (name, contents) in files {
        let blob = random_hash(random, 64);
        std::fs::write(root.join("blobs").join(&blob), contents).unwrap();
        std::os::unix::fs::symlink(Path::new("../../blobs").join(&blob), snapshot.join(name)).unwrap();
    }
}

fn set_ref(cache: &Path, repo_id: &str, revision: &str, contents: &str) {
    let path = repo_root(cache, repo_id).join("refs").join(revision);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
}

/// The error's one-line message, checking that it is a hub-cache error.
fn hub_error(result: kernelscope_model::Result<HubSnapshot>) -> String {
    let error = result.unwrap_err();
    assert!(matches!(error, ModelError::HubCache { .. }), "{error:?}");
    let message = error.to_string();
    assert!(!message.contains('\n'), "not one line: {message:?}");
    message
}

#[test]
fn refs_main_names_the_snapshot() {
    let cache = empty_cache("main");
    let mut random = SplitMix64::new(11);
    let commit = random_hash(&mut random, 40);
    let config = br#"{"architectures": ["LlamaForCausalLM"]}"#;
    add_snapshot(
        &cache,
        "org/name",
        &commit,
        &[("config.json", config)],
        &mut random,
    );
    // The hub writes the hash without a newline; tolerate one anyway.
    set_ref(&cache, "org/name", "main", &format!("{commit}\n"));

    let snapshot = resolve_in_cache(&cache, "org/name", None).unwrap();
    let root = cache.join("models--org--name");
    assert_eq!(snapshot.repo_root, root);
    assert_eq!(snapshot.directory, root.join("snapshots").join(&commit));
    assert_eq!(snapshot.commit, commit);
    // The files are reachable through the symlinks, and resolve inside the repo.
    assert_eq!(
        std::fs::read(snapshot.directory.join("config.json")).unwrap(),
        config
    );
    let target = std::fs::canonicalize(snapshot.directory.join("config.json")).unwrap();
    assert!(target.starts_with(std::fs::canonicalize(&root).unwrap().join("blobs")));
    std::fs::remove_dir_all(cache).unwrap();
}

#[test]
fn a_revision_names_a_branch_tag_or_nested_ref() {
    let cache = empty_cache("revision");
    let mut random = SplitMix64::new(12);
    let commits: Vec<String> = (0..3).map(|_| random_hash(&mut random, 40)).collect();
    for commit in &commits {
        add_snapshot(
            &cache,
            "Qwen/Qwen2.5-0.5B",
            commit,
            &[("config.json", b"{}")],
            &mut random,
        );
    }
    set_ref(&cache, "Qwen/Qwen2.5-0.5B", "main", &commits[0]);
    set_ref(&cache, "Qwen/Qwen2.5-0.5B", "dev", &commits[1]);
    set_ref(&cache, "Qwen/Qwen2.5-0.5B", "refs/pr/7", &commits[2]);

    for (revision, commit) in [
        (None, &commits[0]),
        (Some("main"), &commits[0]),
        (Some("dev"), &commits[1]),
    ] {
        let snapshot = resolve_in_cache(&cache, "Qwen/Qwen2.5-0.5B", revision).unwrap();
        assert_eq!(&snapshot.commit, commit, "{revision:?}");
        assert!(snapshot.directory.ends_with(Path::new("snapshots").join(commit)));
    }
    let pull_request = resolve_in_cache(&cache, "Qwen/Qwen2.5-0.5B", Some("refs/pr/7")).unwrap();
    assert_eq!(pull_request.commit, commits[2]);
    std::fs::remove_dir_all(cache).unwrap();
}

#[test]
fn a_commit_hash_revision_names_its_snapshot_directly() {
    let cache = empty_cache("hash");
    let mut random = SplitMix64::new(13);
    let (main, older) = (random_hash(&mut random, 40), random_hash(&mut random, 40));
    add_snapshot(&cache, "org/name", &main, &[("config.json", b"{}")], &mut random);
    add_snapshot(&cache, "org/name", &older, &[("config.json", b"{}")], &mut random);
    set_ref(&cache, "org/name", "main", &main);

    let snapshot = resolve_in_cache(&cache, "org/name", Some(&older)).unwrap();
    assert_eq!(snapshot.commit, older);
    assert_eq!(
        snapshot.directory,
        repo_root(&cache, "org/name").join("snapshots").join(&older)
    );

    // A SHA-256 commit (64 hex digits) works the same way.
    let long = random_hash(&mut random, 64);
    add_snapshot(&cache, "org/name", &long, &[("config.json", b"{}")], &mut random);
    assert_eq!(
        resolve_in_cache(&cache, "org/name", Some(&long)).unwrap().commit,
        long
    );

    // A hash that is not cached says so and how to fetch it.
    let missing = random_hash(&mut random, 40);
    let message = hub_error(resolve_in_cache(&cache, "org/name", Some(&missing)));
    assert!(
        message.contains(&format!("revision {missing} is not cached")),
        "{message}"
    );
    assert!(
        message.contains(&format!("hf download org/name --revision {missing}")),
        "{message}"
    );
    assert!(
        message.contains(&main[..12]) && message.contains(&older[..12]),
        "{message}"
    );
    std::fs::remove_dir_all(cache).unwrap();
}

#[test]
fn a_missing_repo_names_the_cache_and_the_download_command() {
    let cache = empty_cache("missing-repo");
    let mut random = SplitMix64::new(14);
    let commit = random_hash(&mut random, 40);
    add_snapshot(
        &cache,
        "org/other",
        &commit,
        &[("config.json", b"{}")],
        &mut random,
    );
    set_ref(&cache, "org/other", "main", &commit);

    let message = hub_error(resolve_in_cache(&cache, "org/name", None));
    assert_eq!(
        message,
        format!(
            "org/name: not in the Hugging Face cache at {} (no models--org--name there); download it with: hf download org/name",
            cache.display()
        )
    );
    let message = hub_error(resolve_in_cache(&cache, "org/name", Some("v2")));
    assert!(
        message.ends_with("download it with: hf download org/name --revision v2"),
        "{message}"
    );

    let absent = cache.join("no-such-cache");
    let message = hub_error(resolve_in_cache(&absent, "org/name", None));
    assert!(
        message.contains(&format!("{} (no such directory)", absent.display())),
        "{message}"
    );
    std::fs::remove_dir_all(cache).unwrap();
}

#[test]
fn a_missing_ref_lists_what_is_cached() {
    let cache = empty_cache("missing-ref");
    let mut random = SplitMix64::new(15);
    let commit = random_hash(&mut random, 40);
    add_snapshot(
        &cache,
        "org/name",
        &commit,
        &[("config.json", b"{}")],
        &mut random,
    );
    set_ref(&cache, "org/name", "dev", &commit);

    let message = hub_error(resolve_in_cache(&cache, "org/name", None));
    assert!(message.starts_with("org/name: no refs/main in "), "{message}");
    assert!(message.contains("cached refs: dev; snapshots: "), "{message}");
    assert!(message.contains(&commit[..12]), "{message}");
    assert!(message.contains("hf download org/name"), "{message}");

    // No refs at all, only a snapshot.
    std::fs::remove_dir_all(repo_root(&cache, "org/name").join("refs")).unwrap();
    let message = hub_error(resolve_in_cache(&cache, "org/name", Some("v1")));
    assert!(message.contains("no refs/v1"), "{message}");
    assert!(
        message.contains(&format!("no refs; cached snapshots: {}", &commit[..12])),
        "{message}"
    );
    std::fs::remove_dir_all(cache).unwrap();
}

#[test]
fn a_ref_naming_a_missing_snapshot_says_so() {
    let cache = empty_cache("missing-snapshot");
    let mut random = SplitMix64::new(16);
    let (cached, named) = (random_hash(&mut random, 40), random_hash(&mut random, 40));
    add_snapshot(
        &cache,
        "org/name",
        &cached,
        &[("config.json", b"{}")],
        &mut random,
    );
    set_ref(&cache, "org/name", "main", &named);
    let message = hub_error(resolve_in_cache(&cache, "org/name", None));
    assert!(
        message.contains(&format!(
            "refs/main names commit {named} but snapshots/{named} is missing"
        )),
        "{message}"
    );
    std::fs::remove_dir_all(cache).unwrap();
}

#[test]
fn malformed_ref_contents_are_refused() {
    let cache = empty_cache("malformed-ref");
    let mut random = SplitMix64::new(17);
    let commit = random_hash(&mut random, 40);
    add_snapshot(
        &cache,
        "org/name",
        &commit,
        &[("config.json", b"{}")],
        &mut random,
    );
    let too_long = "ab".repeat(2000);
    for contents in [
        "",
        "not a hash",
        &commit[..39],
        &format!("{commit}0"),
        &commit.to_uppercase(),
        &format!("../snapshots/{commit}"),
        &too_long,
    ] {
        set_ref(&cache, "org/name", "main", contents);
        let message = hub_error(resolve_in_cache(&cache, "org/name", None));
        assert!(message.contains("not a commit hash"), "{contents:?}: {message}");
        assert!(message.contains("refs/main"), "{message}");
    }
    std::fs::remove_dir_all(cache).unwrap();
}

#[test]
fn revisions_cannot_leave_refs() {
    let cache = empty_cache("revision-traversal");
    let mut random = SplitMix64::new(18);
    let commit = random_hash(&mut random, 40);
    add_snapshot(
        &cache,
        "org/name",
        &commit,
        &[("config.json", b"{}")],
        &mut random,
    );
    // Valid hashes where a traversal would land, so only the check stops it.
    let root = repo_root(&cache, "org/name");
    std::fs::write(root.join("outside"), &commit).unwrap();
    std::fs::write(cache.join("outside"), &commit).unwrap();
    for revision in [
        "../outside",
        "../../outside",
        "dev/../../outside",
        "..",
        ".",
        "/etc/passwd",
        "a//b",
        "dev/",
        "",
        "main\0",
        "main\nx",
        "..\\outside",
    ] {
        let message = hub_error(resolve_in_cache(&cache, "org/name", Some(revision)));
        assert!(message.contains("is not usable"), "{revision:?}: {message}");
    }
    std::fs::remove_dir_all(cache).unwrap();
}

#[test]
fn repo_ids_are_org_slash_name() {
    for good in [
        "meta-llama/Llama-3.2-1B",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "a_b.c/d-e.f",
        "o/n",
    ] {
        assert!(looks_like_repo_id(good), "{good}");
    }
    let cache = empty_cache("repo-traversal");
    for bad in [
        "",
        "name",
        "org/",
        "/name",
        "org/name/extra",
        "../name",
        "org/..",
        "./name",
        "org/.",
        "-org/name",
        "org/-name",
        "org/na me",
        "org/name\n",
        "org\\name",
        "org/näme",
        "/etc/passwd",
    ] {
        assert!(!looks_like_repo_id(bad), "{bad:?}");
        let message = hub_error(resolve_in_cache(&cache, bad, None));
        assert!(
            message.contains("not a Hugging Face repo id"),
            "{bad:?}: {message}"
        );
    }
    std::fs::remove_dir_all(cache).unwrap();
}

#[test]
fn cache_directory_follows_huggingface_hub_precedence() {
    let os = |text: &str| Some(OsString::from(text));
    let everything = HubCacheEnvironment {
        hf_hub_cache: os("/hub-cache"),
        huggingface_hub_cache: os("/legacy-cache"),
        hf_home: os("/hf-home"),
        xdg_cache_home: os("/xdg"),
        home: os("/home/someone"),
    };
    assert_eq!(everything.cache_directory(), Some(PathBuf::from("/hub-cache")));
    let without_hub_cache = HubCacheEnvironment {
        hf_hub_cache: None,
        ..everything.clone()
    };
    assert_eq!(
        without_hub_cache.cache_directory(),
        Some(PathBuf::from("/legacy-cache"))
    );
    let without_legacy = HubCacheEnvironment {
        huggingface_hub_cache: None,
        ..without_hub_cache.clone()
    };
    assert_eq!(
        without_legacy.cache_directory(),
        Some(PathBuf::from("/hf-home/hub"))
    );
    let without_hf_home = HubCacheEnvironment {
        hf_home: None,
        ..without_legacy.clone()
    };
    assert_eq!(
        without_hf_home.cache_directory(),
        Some(PathBuf::from("/xdg/huggingface/hub"))
    );
    let only_home = HubCacheEnvironment {
        xdg_cache_home: None,
        ..without_hf_home.clone()
    };
    assert_eq!(
        only_home.cache_directory(),
        Some(PathBuf::from("/home/someone/.cache/huggingface/hub"))
    );
    assert_eq!(HubCacheEnvironment::default().cache_directory(), None);

    // Empty values count as unset, as a shell's `HF_HOME=` means.
    let empty = HubCacheEnvironment {
        hf_hub_cache: os(""),
        hf_home: os(""),
        ..only_home.clone()
    };
    assert_eq!(empty.cache_directory(), only_home.cache_directory());
    // A leading `~` is the home directory, as Python's expanduser has it.
    let tilde = HubCacheEnvironment {
        hf_home: os("~/models"),
        ..only_home.clone()
    };
    assert_eq!(
        tilde.cache_directory(),
        Some(PathBuf::from("/home/someone/models/hub"))
    );
    let tilde = HubCacheEnvironment {
        hf_hub_cache: os("~"),
        ..only_home
    };
    assert_eq!(tilde.cache_directory(), Some(PathBuf::from("/home/someone")));
}

#[test]
fn the_process_environment_is_read_without_downloading() {
    // Whatever this machine's cache holds, this repo is not in it: the
    // answer is an error naming the download command (or, with no HOME,
    // saying the cache cannot be located), never a network access.
    let message = hub_error(resolve_hub_model("kernelscope-tests/never-downloaded", None));
    assert!(
        message.contains("hf download kernelscope-tests/never-downloaded")
            || message.contains("cannot locate the Hugging Face cache"),
        "{message}"
    );
    let environment = HubCacheEnvironment::from_process();
    assert_eq!(environment.home, std::env::var_os("HOME"));
}
