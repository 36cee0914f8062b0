//! The runtime's files depend on each other without cycles: each file's
//! `use` lines (of `super::…`, `self::…` and `crate::runtime::…` paths) are
//! resolved to the files they name, and the graph must be acyclic, so the
//! layering ARCHITECTURE describes (profile ← memory ← buffer ← dispatch ←
//! command ← backend ← cpu/cuda ← device ← registry, encoder) cannot
//! quietly erode.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(directory: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(directory).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            found.push(path);
        }
    }
}

/// `cpu/mod.rs` → `["cpu"]`, `cpu/memory.rs` → `["cpu", "memory"]`, `mod.rs` → `[]`.
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    parts
}

/// The trees of a file's `use` statements (`pub use` ones too), each
/// started at the beginning of a line and ended at its `;`.
fn use_trees(text: &str) -> Vec<String> {
    let mut trees = Vec::new();
    let mut open: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(tree) = open.as_mut() {
            tree.push_str(line);
        } else if let Some(rest) = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|prefix| line.strip_prefix(prefix))
        {
            open = Some(rest.to_string());
        }
        if let Some(tree) = open.take_if(|tree| tree.ends_with(';')) {
            trees.push(tree.trim_end_matches(';').to_string());
        }
    }
    trees
}

/// Every path a `use` statement names, braces expanded (one level deep is
/// all this code base uses, but nesting is handled).
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = format!("{prefix}{}", &tree[..open]);
        let inner = &tree[open + 1..tree.rfind('}').unwrap()];
        let (mut depth, mut start) = (0, 0);
        for (index, character) in inner.char_indices() {
            match character {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&head, &inner[start..index], out);
                    start = index + 1;
                }
                _ => {}
            }
        }
        expand(&head, &inner[start..], out);
    } else if !tree.is_empty() {
        out.push(format!("{prefix}{tree}"));
    }
}

#[test]
fn runtime_files_have_no_import_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/runtime");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .map(|file| (module_of(&root, file), file.clone()))
        .collect();
    // Items re-exported by runtime/mod.rs (`pub use buffer::{Buffer, …}`) name their file.
    let mut reexports: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mod_rs = std::fs::read_to_string(root.join("mod.rs")).unwrap();
    for tree in use_trees(&mod_rs) {
        let mut paths = Vec::new();
        expand("", &tree, &mut paths);
        for path in paths {
            let parts: Vec<&str> = path.split("::").map(str::trim).collect();
            if parts.len() >= 2 && parts[0] != "crate" {
                reexports.insert(parts[parts.len() - 1].to_string(), vec![parts[0].to_string()]);
            }
        }
    }

    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap();
        let is_mod_rs = file.ends_with("mod.rs");
        let mut targets = BTreeSet::new();
        for tree in use_trees(&text) {
            let mut paths = Vec::new();
            expand("", &tree, &mut paths);
            for path in paths {
                let parts: Vec<&str> = path.split("::").map(str::trim).collect();
                // The module the path starts from, then the rest.
                let (mut base, rest): (Vec<String>, &[&str]) = match parts[0] {
                    "crate" if parts.get(1) == Some(&"runtime") => (Vec::new(), &parts[2..]),
                    "super" => {
                        let mut base = module.clone();
                        // In `foo/mod.rs`, `super` is foo's parent; in `foo/bar.rs`, it is foo.
                        base.pop();
                        let mut rest = &parts[1..];
                        while rest.first() == Some(&"super") {
                            base.pop();
                            rest = &rest[1..];
                        }
                        (base, rest)
                    }
                    "self" if is_mod_rs => (module.clone(), &parts[1..]),
                    // Submodule declarations used through their name: `use memory::CpuMemory` in a mod.rs.
                    first
                        if is_mod_rs
                            && modules.contains_key(&[module.clone(), vec![first.to_string()]].concat()) =>
                    {
                        (module.clone(), &parts[..])
                    }
                    _ => continue,
                };
                // The longest prefix that is a file of ours.
                let mut resolved = None;
                for part in rest {
                    base.push(part.to_string());
                    if modules.contains_key(&base) {
                        resolved = Some(base.clone());
                    } else {
                        break;
                    }
                }
                if resolved.is_none() && base.len() == rest.len() && !rest.is_empty() {
                    // `crate::runtime::Name` or `super::Name` from a top-level file.
                    resolved = reexports.get(rest[0]).cloned();
                }
                if let Some(target) = resolved
                    && target != *module
                    && !target.is_empty()
                {
                    targets.insert(target);
                }
            }
        }
        edges.insert(module.clone(), targets);
    }

    // Depth-first search for a back edge.
    fn visit(
        node: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, bool>,
        path: &mut Vec<Vec<String>>,
    ) -> Option<Vec<String>> {
        state.insert(node.clone(), false);
        path.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            match state.get(next) {
                Some(false) => {
                    let start = path.iter().position(|step| step == next).unwrap();
                    let mut cycle: Vec<String> = path[start..].iter().map(|step| step.join("/")).collect();
                    cycle.push(next.join("/"));
                    return Some(cycle);
                }
                Some(true) => {}
                None => {
                    if let Some(cycle) = visit(next, edges, state, path) {
                        return Some(cycle);
                    }
                }
            }
        }
        path.pop();
        state.insert(node.clone(), true);
        None
    }
    let mut state = BTreeMap::new();
    for node in edges.keys() {
        if !state.contains_key(node) {
            let cycle = visit(node, &edges, &mut state, &mut Vec::new());
            assert!(
                cycle.is_none(),
                "runtime/ files import each other in a cycle: {}",
                cycle.unwrap().join(" -> ")
            );
        }
    }
    // The check sees the dependencies it is meant to see.
    let device = edges.get(&vec!["device".to_string()]).unwrap();
    assert!(device.contains(&vec!["backend".to_string()]), "{device:?}");
    assert!(edges[&vec!["encoder".to_string()]].contains(&vec!["device".to_string()]));
}
