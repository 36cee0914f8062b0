//! NVRTC compilation of kernel sources for a device's architecture, cached
//! in memory by the device and on disk here, keyed by the source's hash, the
//! architecture and the NVRTC version, so a second run loads PTX instead of
//! compiling.

use std::path::PathBuf;

use cudarc::nvrtc::{CompileOptions, Ptx};

use crate::error::{CudaUnavailable, Error, Remedy, Result};

pub(crate) fn nvrtc_version() -> (i32, i32) {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints; only called after NVRTC was found.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    (major, minor)
}

pub(crate) fn nvrtc_present() -> bool {
    // SAFETY: only tries to load the library by its known names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// FNV-1a of the source, the architecture and the NVRTC version.
pub(crate) fn source_key(source: &str, arch: &str) -> u64 {
    let (major, minor) = if nvrtc_present() { nvrtc_version() } else { (0, 0) };
    crate::hash::fnv1a64(format!("{source}\u{0}{arch}\u{0}{major}.{minor}").as_bytes())
}

/// `$KSCOPE_KERNEL_CACHE`, else `$XDG_CACHE_HOME/kernelscope/kernels`, else
/// `~/.cache/kernelscope/kernels`; `None` when none can be made.
fn cache_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("KSCOPE_KERNEL_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
                .map(|base| base.join("kernelscope").join("kernels"))
        })?;
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

/// PTX for `source` (whose kernel of interest is `name`), compiled by NVRTC
/// now, with the options every kernel source is compiled with; no device and
/// no cache are involved, so a machine without a GPU checks kernels this way
/// (`kernelscope::testing::nvrtc`).
pub(crate) fn nvrtc_compile(name: &str, source: &str, arch: &'static str) -> Result<Ptx> {
    if !nvrtc_present() {
        return Err(Error::BackendUnavailable {
            backend: "cuda",
            ordinal: None,
            source: CudaUnavailable::NoNvrtc,
            remedies: &[Remedy::OtherDevice { device: "cpu" }],
        });
    }
    let options = CompileOptions {
        arch: Some(arch),
        options: vec!["--std=c++17".into()],
        name: Some(format!("{name}.cu")),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(source, options).map_err(|source| Error::CudaCompile {
        kernel: name.to_string(),
        source,
    })
}

/// PTX for `source` (whose kernel of interest is `name`), from the disk
/// cache or compiled by NVRTC.
pub(crate) fn compile(
    name: &str,
    source: &str,
    arch: &'static str,
    key: u64,
    use_cache: bool,
) -> Result<Ptx> {
    let cached = cache_dir().map(|dir| dir.join(format!("{key:016x}-{arch}.ptx")));
    if use_cache
        && let Some(path) = &cached
        && let Ok(text) = std::fs::read_to_string(path)
    {
        return Ok(Ptx::from_src(text));
    }
    let ptx = nvrtc_compile(name, source, arch)?;
    if let Some(path) = cached {
        // Written aside and renamed, so a concurrent or killed run never
        // leaves a half-written file; a cache that cannot be written only
        // costs a recompile next time.
        let partial = path.with_extension(format!("ptx.{}", std::process::id()));
        if std::fs::write(&partial, ptx.to_src()).is_ok() {
            let _ = std::fs::rename(&partial, &path);
        }
    }
    Ok(ptx)
}
