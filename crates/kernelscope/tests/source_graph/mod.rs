//! The structure test's graph of a crate's files: every path a file names
//! resolved (through re-exports) to the file that defines the item, the
//! cycles among them, and the dependencies that go up the layers.

mod tokens;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use tokens::{FileFacts, read_file};

/// A module: its path from the crate root (`["runtime", "cuda", "nccl"]`).
pub type Module = Vec<String>;

/// A dependency of one file on another, with where it is first named.
pub type Edges = BTreeMap<Module, BTreeMap<Module, (usize, String)>>;

/// A crate's files, read: the module each is, what it names, and so which
/// file depends on which.
pub struct Crate {
    files: BTreeMap<Module, FileFacts>,
    pub edges: Edges,
}

impl Crate {
    /// `sources`: (path relative to `src/`, text): `lib.rs` is the root,
    /// `a/mod.rs` and `a.rs` are module `a`.
    pub fn new(sources: &[(impl AsRef<str>, impl AsRef<str>)]) -> Crate {
        let files = sources
            .iter()
            .map(|(path, text)| {
                let (path, text) = (path.as_ref(), text.as_ref());
                let mut module: Module = path
                    .trim_end_matches(".rs")
                    .split('/')
                    .map(str::to_string)
                    .collect();
                if module.last().is_some_and(|last| last == "mod" || last == "lib") {
                    module.pop();
                }
                let facts = FileFacts {
                    path: path.to_string(),
                    ..read_file(&module, text)
                };
                (module, facts)
            })
            .collect();
        let mut read = Crate {
            files,
            edges: Edges::new(),
        };
        read.edges = read.resolve_every_reference();
        read
    }

    /// The files of `src/`.
    pub fn read(source: &Path) -> Crate {
        fn walk(directory: &Path, root: &Path, found: &mut Vec<(String, String)>) {
            for entry in std::fs::read_dir(directory).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, root, found);
                } else if path.extension().is_some_and(|extension| extension == "rs") {
                    let relative = path
                        .strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .replace('\\', "/");
                    found.push((relative, std::fs::read_to_string(&path).unwrap()));
                }
            }
        }
        let mut sources = Vec::new();
        walk(source, source, &mut sources);
        Crate::new(&sources)
    }

    /// The file a (possibly inline) module is written in.
    fn file_of(&self, scope: &[String]) -> Module {
        (0..=scope.len())
            .rev()
            .map(|length| scope[..length].to_vec())
            .find(|module| self.files.contains_key(module))
            .unwrap_or_default()
    }

    /// The files `segments`, written in `scope`, may name: none for other
    /// crates; an item a module imports resolves to where it comes from.
    fn resolve(&self, scope: &[String], segments: &[String], hops: usize) -> Vec<Module> {
        let (start, rest): (Module, &[String]) = match segments[0].as_str() {
            "crate" => (Vec::new(), &segments[1..]),
            "self" => (scope.to_vec(), &segments[1..]),
            "super" => {
                let supers = segments.iter().take_while(|segment| *segment == "super").count();
                (
                    scope[..scope.len().saturating_sub(supers)].to_vec(),
                    &segments[supers..],
                )
            }
            // A child module's path (`cpu::matmul`, `add::register`).
            child if self.files.contains_key(&[scope, &[child.to_string()]].concat()) => {
                (scope.to_vec(), segments)
            }
            _ => return Vec::new(),
        };
        let mut module = self.file_of(&start);
        let mut rest = rest;
        while let Some(segment) = rest.first() {
            let child = [module.clone(), vec![segment.clone()]].concat();
            if !self.files.contains_key(&child) {
                break;
            }
            module = child;
            rest = &rest[1..];
        }
        match rest
            .first()
            .and_then(|name| self.files[&module].imports.get(name))
        {
            Some(paths) if hops < 8 => {
                let found: BTreeSet<Module> = paths
                    .iter()
                    .flat_map(|path| {
                        self.resolve(&module, &[path.clone(), rest[1..].to_vec()].concat(), hops + 1)
                    })
                    .collect();
                // Another crate's item, or a macro the module defines and re-exports.
                if found.is_empty() {
                    vec![module]
                } else {
                    found.into_iter().collect()
                }
            }
            _ => vec![module],
        }
    }

    fn resolve_every_reference(&self) -> Edges {
        let mut edges = Edges::new();
        for (module, facts) in &self.files {
            let targets = edges.entry(module.clone()).or_default();
            for reference in &facts.references {
                for target in self.resolve(&reference.scope, &reference.segments, 0) {
                    if target != *module {
                        targets
                            .entry(target)
                            .or_insert_with(|| (reference.line, reference.segments.join("::")));
                    }
                }
            }
        }
        edges
    }

    /// Whether `from` names something of `to`.
    pub fn depends(&self, from: &str, to: &str) -> bool {
        let module = |path: &str| -> Module { path.split('/').map(str::to_string).collect() };
        self.edges[&module(from)].contains_key(&module(to))
    }

    /// `from -> to (from:line names `path`)`.
    fn step(&self, from: &Module, to: &Module) -> String {
        let (line, named) = &self.edges[from][to];
        let (from, to) = (&self.files[from].path, &self.files[to].path);
        format!("{from} -> {to} ({from}:{line} names `{named}`)")
    }

    /// One cycle per strongly connected group of files (Tarjan) that has a
    /// file `concerned` takes, each a shortest way from its first file back
    /// to it. The whole crate is searched, so a cycle that leaves the
    /// concerned files and comes back is found too.
    pub fn cycles(&self, concerned: impl Fn(&Module) -> bool) -> Vec<String> {
        let kept: BTreeMap<&Module, Vec<&Module>> = self
            .edges
            .iter()
            .map(|(from, to)| (from, to.keys().collect()))
            .collect();
        let mut found = Vec::new();
        for group in strongly_connected(&kept)
            .into_iter()
            .filter(|group| group.len() > 1 && group.iter().any(|member| concerned(member)))
        {
            let start = group[0];
            let mut previous: BTreeMap<&Module, &Module> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([start]);
            'search: while let Some(node) = queue.pop_front() {
                for &next in kept[node].iter().filter(|next| group.contains(next)) {
                    if !previous.contains_key(next) {
                        previous.insert(next, node);
                        if next == start {
                            break 'search;
                        }
                        queue.push_back(next);
                    }
                }
            }
            let mut path = vec![start];
            while let Some(&before) = previous.get(path.last().unwrap()) {
                path.push(before);
                if before == start {
                    break;
                }
            }
            path.reverse();
            let steps: Vec<String> = path.windows(2).map(|pair| self.step(pair[0], pair[1])).collect();
            let mut files: Vec<&str> = group
                .iter()
                .map(|module| self.files[*module].path.as_str())
                .collect();
            files.sort();
            found.push(format!(
                "cycle among {}:\n    {}",
                files.join(", "),
                steps.join("\n    ")
            ));
        }
        found
    }

    /// Dependencies that go up the layers ops → runtime → profile, by the
    /// top-level module of each file.
    pub fn layering_violations(&self) -> Vec<String> {
        // Layers from the top: probes, ops, cpu_simd, runtime, profile.
        const FORBIDDEN: [(&str, &str); 11] = [
            ("profile", "runtime"),
            ("profile", "ops"),
            ("profile", "probes"),
            ("profile", "cpu_simd"),
            ("runtime", "ops"),
            ("runtime", "probes"),
            ("runtime", "cpu_simd"),
            ("cpu_simd", "ops"),
            ("cpu_simd", "probes"),
            ("ops", "probes"),
            ("quant", "ops"),
        ];
        let top = |module: &Module| module.first().cloned().unwrap_or_default();
        let mut found = Vec::new();
        for (from, targets) in &self.edges {
            for target in targets.keys() {
                if FORBIDDEN.contains(&(top(from).as_str(), top(target).as_str())) {
                    found.push(format!(
                        "{} ({} must not depend on {})",
                        self.step(from, target),
                        top(from),
                        top(target)
                    ));
                }
            }
        }
        found
    }
}

/// The strongly connected groups of `graph` (Tarjan), each in its order of discovery.
fn strongly_connected<'a>(graph: &BTreeMap<&'a Module, Vec<&'a Module>>) -> Vec<Vec<&'a Module>> {
    struct Search<'g, 'a> {
        graph: &'g BTreeMap<&'a Module, Vec<&'a Module>>,
        /// Each visited node's order of discovery and lowest order reachable.
        order: BTreeMap<&'a Module, (usize, usize)>,
        stack: Vec<&'a Module>,
        groups: Vec<Vec<&'a Module>>,
    }
    fn visit<'a>(search: &mut Search<'_, 'a>, node: &'a Module) {
        let discovered = search.order.len();
        search.order.insert(node, (discovered, discovered));
        search.stack.push(node);
        for &next in search.graph.get(node).into_iter().flatten() {
            let reach = if !search.order.contains_key(next) {
                visit(search, next);
                search.order[next].1
            } else if search.stack.contains(&next) {
                search.order[next].0
            } else {
                continue;
            };
            let low = &mut search.order.get_mut(node).unwrap().1;
            *low = (*low).min(reach);
        }
        if search.order[node].0 == search.order[node].1 {
            let start = search.stack.iter().position(|member| *member == node).unwrap();
            search.groups.push(search.stack.split_off(start));
        }
    }
    let mut search = Search {
        graph,
        order: BTreeMap::new(),
        stack: Vec::new(),
        groups: Vec::new(),
    };
    for &node in graph.keys() {
        if !search.order.contains_key(node) {
            visit(&mut search, node);
        }
    }
    search.groups
}
