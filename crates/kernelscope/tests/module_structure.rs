//! The crate's files depend on each other the way ARCHITECTURE's layers say:
//! every path a file names (in `use` lines and in code: `super::x::Y`,
//! `self::x`, `crate::runtime::Y`, a child module's `x::f`) is resolved,
//! through re-exports, to the file that defines the item, and then no file
//! of runtime/ may be part of a cycle (even one through other modules), and
//! profile must not name runtime or ops, nor runtime ops. Reading only `use` lines missed cycles made
//! of paths written in code, so the parser reads tokens, not lines. That no
//! file of any crate is in an import cycle at all is `import_loops.rs`'s check.

mod source_graph;

use std::path::Path;

use source_graph::{Crate, Module};

fn source_crate() -> Crate {
    Crate::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

fn in_runtime(module: &Module) -> bool {
    module.first().is_some_and(|top| top == "runtime")
}

#[test]
fn runtime_files_have_no_import_cycles() {
    let source = source_crate();
    let found = source.cycles(in_runtime);
    assert!(
        found.is_empty(),
        "runtime/ files depend on each other in cycles:\n{}",
        found.join("\n")
    );
    // The check sees what it is meant to see: `use` lines, paths in code,
    // re-exports.
    assert!(source.depends("runtime/device", "runtime/backend"));
    assert!(source.depends("runtime/encoder", "runtime/device"));
    assert!(source.depends("runtime/cuda/execute", "runtime/cuda/nvtx"));
    assert!(source.depends("runtime/collective", "runtime/cuda/device"));
    assert!(source.depends("runtime/cuda/device", "runtime/cuda/nccl"));
}

#[test]
fn profile_runtime_and_ops_depend_only_downward() {
    let found = source_crate().layering_violations();
    assert!(
        found.is_empty(),
        "dependencies against the layers ops → runtime → profile:\n{}",
        found.join("\n")
    );
}

/// The analysis on a crate made up here: a cycle written only in code
/// (`super::y::Y::new()`), an upward dependency in a type and the cycle it
/// closes through profile are reported,
/// while comments, literals, inline test modules and a re-exporting parent
/// are not taken for dependencies. (Before the fix, the real crate failed
/// the test above with two cycles: runtime/cpu's memory naming its parent's
/// `CpuShared`, and runtime/cuda's `modules -> nccl -> device -> modules`,
/// whose first step is `super::nccl::NcclGroup` in a type.)
#[test]
fn an_injected_cycle_and_an_upward_dependency_are_reported() {
    let read = |files: &[(&str, &str)]| Crate::new(files);
    let mut files = vec![
        ("lib.rs", "pub mod runtime;\npub mod profile;\n"),
        (
            "profile/mod.rs",
            "//! crate::runtime::x, in a comment\npub struct P;\n\
             fn f() { let _ = ('\\'', \"crate::runtime::x::X\", r#\"crate::runtime::x\"#, '\"'); }\n",
        ),
        (
            "runtime/mod.rs",
            "mod x;\nmod y;\npub use x::X;\npub use y::{self as why, Y};\n",
        ),
        (
            "runtime/x.rs",
            "pub struct X;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        ),
        (
            "runtime/y.rs",
            "use super::X;\npub struct Y(X);\nfn f() -> crate::profile::P { self::g() }\n",
        ),
    ];
    let acyclic = read(&files);
    assert!(acyclic.depends("runtime/y", "runtime/x"), "{:?}", acyclic.edges);
    assert!(acyclic.depends("runtime/y", "profile"));
    assert!(acyclic.depends("runtime", "runtime/y"));
    assert!(!acyclic.depends("runtime/y", "runtime"), "{:?}", acyclic.edges);
    assert!(!acyclic.depends("profile", "runtime/x"), "{:?}", acyclic.edges);
    assert!(acyclic.cycles(in_runtime).is_empty());
    assert!(acyclic.layering_violations().is_empty());

    // A cycle written in code, inside runtime/.
    let acyclic_x = files[3].1;
    files[3].1 = "pub struct X;\nfn make() { let _ = super::y::Y::new(); }\n";
    let found = read(&files).cycles(in_runtime);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("runtime/x.rs -> runtime/y.rs (runtime/x.rs:2 names `super::y::Y::new`)")
            && found[0].contains("runtime/y.rs -> runtime/x.rs (runtime/y.rs:1 names `super::X`)"),
        "{}",
        found[0]
    );

    // An upward dependency in a type; with it, a cycle that leaves runtime/.
    files[3].1 = acyclic_x;
    files[1].1 = "pub struct P(crate::runtime::Y);\n";
    let upward = read(&files);
    assert_eq!(
        upward.layering_violations(),
        [
            "profile/mod.rs -> runtime/y.rs (profile/mod.rs:1 names `crate::runtime::Y`) (profile must not depend on runtime)"
        ]
    );
    let found = upward.cycles(in_runtime);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("cycle among profile/mod.rs, runtime/y.rs:"),
        "{}",
        found[0]
    );
}
