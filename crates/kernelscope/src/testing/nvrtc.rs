//! A registry's CUDA sources compiled by NVRTC as the runtime compiles them
//! on a GPU (the same source text, the same options, through the same
//! function), on a machine without one: NVRTC needs only libnvrtc (the
//! `nvidia-cuda-nvrtc` wheel has it), neither a device nor the CUDA
//! toolkit. `tests/nvrtc_compile.rs` runs it over every registry; CI runs
//! that test with [`REQUIRE_NVRTC_ENV_VAR`] set.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::Error;

/// Set to `1` to make a test fail instead of skipping where libnvrtc cannot
/// be loaded.
pub const REQUIRE_NVRTC_ENV_VAR: &str = "KSCOPE_REQUIRE_NVRTC";

/// Whether [`REQUIRE_NVRTC_ENV_VAR`] is `1`.
pub fn nvrtc_required() -> bool {
    std::env::var(REQUIRE_NVRTC_ENV_VAR).is_ok_and(|value| value.trim() == "1")
}

/// NVRTC's version, `(major, minor)`, where libnvrtc can be loaded (by the
/// names cudarc tries, from the loader's path: `LD_LIBRARY_PATH`).
pub fn nvrtc_version() -> Option<(i32, i32)> {
    crate::runtime::nvrtc_present().then(crate::runtime::nvrtc_version)
}

/// One distinct CUDA source of a registry and what NVRTC made of it.
#[derive(Clone, Debug)]
pub struct CompiledSource {
    /// The kernels registered with this source; NVRTC's program is named
    /// after the first (on a GPU, after whichever is loaded first).
    pub kernels: Vec<String>,
    /// The PTX, or why there is none: NVRTC's status and log (the
    /// runtime's error where NVRTC gave no log).
    pub ptx: Result<String, String>,
}

impl CompiledSource {
    /// The kernels the PTX has no entry for (`.entry <name>(`): on a GPU,
    /// loading one would fail. Empty where the source did not compile.
    pub fn missing_entries(&self) -> Vec<&str> {
        let Ok(ptx) = &self.ptx else { return Vec::new() };
        self.kernels
            .iter()
            .map(String::as_str)
            .filter(|name| !ptx.contains(&format!(".entry {name}(")))
            .collect()
    }
}

/// Compiles every distinct CUDA source of `kernels` (name and source, as
/// [`KernelRegistry::cuda_sources`](crate::KernelRegistry::cuda_sources)
/// lists them; several registries' lists may be chained) for `arch`
/// (`sm_90`) as the runtime would on a device of that architecture, several
/// at once. Each comes back with its kernels, in the order of their first
/// appearance.
pub fn compile_cuda_sources<'a>(
    kernels: impl IntoIterator<Item = (&'a str, &'a str)>,
    arch: &'static str,
) -> Vec<CompiledSource> {
    // The runtime compiles a source once, whichever of its kernels asks
    // first (its module cache is keyed by the source); so does this.
    let mut distinct: Vec<(&str, Vec<String>)> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (name, source) in kernels {
        let slot = *index.entry(source).or_insert_with(|| {
            distinct.push((source, Vec::new()));
            distinct.len() - 1
        });
        if !distinct[slot].1.iter().any(|known| known == name) {
            distinct[slot].1.push(name.to_string());
        }
    }
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(distinct.len().max(1));
    let mut compiled: Vec<(usize, CompiledSource)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let at = next.fetch_add(1, Ordering::Relaxed);
                        let Some((source, kernels)) = distinct.get(at) else {
                            break;
                        };
                        let ptx = crate::runtime::nvrtc_compile(&kernels[0], source, arch)
                            .map(|ptx| ptx.to_src())
                            .map_err(|error| log_of(&error));
                        done.push((
                            at,
                            CompiledSource {
                                kernels: kernels.clone(),
                                ptx,
                            },
                        ));
                    }
                    done
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().expect("an NVRTC worker panicked"))
            .collect()
    });
    compiled.sort_unstable_by_key(|(at, _)| *at);
    compiled.into_iter().map(|(_, source)| source).collect()
}

/// NVRTC's status and its log, readable (cudarc prints the log escaped).
fn log_of(error: &Error) -> String {
    match error {
        Error::CudaCompile {
            source: cudarc::nvrtc::CompileError::CompileError { nvrtc, options, log },
            ..
        } => format!("{nvrtc:?} (options {options:?})\n{}", log.to_string_lossy()),
        other => other.to_string(),
    }
}
