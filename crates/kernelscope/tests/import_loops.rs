//! No file of a crate imports a file that imports it back, directly or
//! through a chain of files: every workspace crate under `crates/` is read
//! with the structure test's parser (`source_graph`: each `.rs` file under
//! `src/`, recursively, `foo.rs` or `foo/mod.rs` being module `foo`; every
//! path a file names — `use crate::…`, `super::…`, `crate::a::b::f()` in
//! code, a child module's `x::f` — resolved through re-exports to the file
//! that defines the item; `mod x;` lines are not imports), and each cycle
//! found is reported with its files and one way round it.
//!
//! Every crate must have none: a new crate is checked as soon as its folder
//! exists. Where two files need each other's items, move the shared item to
//! a file both can import (an op's `arguments.rs`, a module's data types
//! beside its behaviour), as CONTRIBUTING.md says.
//!
//! The parser and the cycle search are `source_graph`'s, shared with
//! `module_structure.rs` (which checks kernelscope's own layers); this file
//! points them at every crate.

#[allow(
    dead_code,
    reason = "shared with module_structure.rs, which uses the layering checks this test does not"
)]
mod source_graph;

use std::path::{Path, PathBuf};

use source_graph::Crate;

/// The workspace's `crates/` folder.
fn crates_folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/kernelscope lies in crates/")
        .to_path_buf()
}

/// Every crate under `crates/` (a folder with a `src/`), by folder name.
fn workspace_crates() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(crates_folder())
        .expect("crates/ reads")
        .map(|entry| entry.expect("an entry of crates/").path())
        .filter(|path| path.join("src").is_dir())
        .filter_map(|path| path.file_name().map(|name| name.to_string_lossy().into_owned()))
        .collect();
    names.sort();
    names
}

/// The import loops among the files of crate `name` (`crates/<name>/src`):
/// one entry per group of files that reach each other, naming the files and
/// one way round (each step with the line and the path that makes it).
fn import_loops(name: &str) -> Vec<String> {
    Crate::read(&crates_folder().join(name).join("src")).cycles(|_| true)
}

/// The crates every workspace has: the reader must find each of them, or
/// the check below would pass over a crate it cannot see.
const KNOWN_CRATES: [&str; 6] = ["inject", "kernelscope", "kscope", "model", "report", "trace"];

#[test]
fn no_crate_has_an_import_loop() {
    let crates = workspace_crates();
    for name in KNOWN_CRATES {
        assert!(
            crates.iter().any(|crate_name| crate_name == name),
            "{name} is not found under crates/: {crates:?}"
        );
    }
    let mut found = Vec::new();
    for name in &crates {
        found.extend(
            import_loops(name)
                .into_iter()
                .map(|cycle| format!("crates/{name}: {cycle}")),
        );
    }
    assert!(
        found.is_empty(),
        "files that import each other in a loop:\n{}",
        found.join("\n")
    );
}

/// The checker sees a loop made through a crate root that both re-exports
/// a module's item and holds an item the module uses (the injection
/// library's old shape), and none once the shared item moves down.
#[test]
fn a_loop_through_the_crate_root_is_found_and_a_layered_crate_passes() {
    let read = |files: &[(&str, &str)]| Crate::new(files);
    let looped = read(&[
        (
            "lib.rs",
            "mod sink;\nmod exit;\npub use sink::PERIOD;\npub(crate) fn lock() {}\n",
        ),
        (
            "sink.rs",
            "pub const PERIOD: u32 = 1;\nfn open() { crate::lock(); crate::exit::install(); }\n",
        ),
        (
            "exit.rs",
            "use crate::sink;\npub(crate) fn install() { let _ = sink::PERIOD; }\n",
        ),
    ]);
    let found = looped.cycles(|_| true);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("cycle among exit.rs, lib.rs, sink.rs:"),
        "{}",
        found[0]
    );
    let layered = read(&[
        (
            "lib.rs",
            "mod locking;\nmod sink;\nmod exit;\npub use sink::PERIOD;\n",
        ),
        ("locking.rs", "pub(crate) fn lock() {}\n"),
        (
            "sink.rs",
            "pub const PERIOD: u32 = 1;\nfn open() { crate::locking::lock(); }\n",
        ),
        (
            "exit.rs",
            "use crate::sink;\npub(crate) fn install() { let _ = sink::PERIOD; crate::locking::lock(); }\n",
        ),
        (
            "graph/mod.rs",
            "mod state;\nmod tests;\npub(crate) fn f() { state::g(); }\n",
        ),
        ("graph/state.rs", "pub(super) fn g() { crate::sink::PERIOD; }\n"),
        ("graph/tests.rs", "use super::*;\n"),
    ]);
    assert!(
        layered.cycles(|_| true).is_empty(),
        "{:?}",
        layered.cycles(|_| true)
    );
}
