//! The kernel registry: kernels registered once under a name with an
//! implementation per backend (a Rust function for the CPU, CUDA C source
//! for NVRTC), handed out per device. Asking for a kernel on a backend it
//! lacks is an error naming the workaround, never a fallback.
//!
//! A kernel is also declared here, once, to read a format (a block format
//! such as `q4_k`, or a dense dtype): the handle carries it into every
//! record of its dispatches, and the report groups time by it. Profiles
//! once took it from kernel names; a declaration cannot be misread, and a
//! test (`kernel_formats_tests.rs`) checks that every kernel of
//! `ops::registry()` whose name names a format declares that one.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::backend::KernelSources;
use super::cpu::KernelArgs;
use super::{Device, Kernel, LibraryCall};
use crate::error::{Error, Result};

/// Kernels by name, each with an implementation per backend.
#[derive(Default, Clone)]
pub struct KernelRegistry {
    entries: HashMap<String, KernelSources>,
    /// The format each kernel reads, for those that declared one.
    formats: HashMap<String, Arc<str>>,
}

impl fmt::Debug for KernelRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&String> = self.entries.keys().collect();
        names.sort();
        f.debug_struct("KernelRegistry").field("kernels", &names).finish()
    }
}

impl KernelRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry of what `register` registers alone: a probe's own
    /// kernels, without the rest of the registry that registers it.
    pub fn of(register: impl FnOnce(&mut KernelRegistry)) -> Self {
        let mut registry = Self::new();
        register(&mut registry);
        registry
    }

    /// Registers (or replaces) the CPU implementation of `name`. The function
    /// must reach memory only through its [`KernelArgs`]: buffers captured
    /// from outside and read inside a kernel would wait on the queue that is
    /// running the kernel.
    pub fn register_cpu(
        &mut self,
        name: &str,
        function: impl Fn(&KernelArgs<'_>) -> Result<()> + Send + Sync + 'static,
    ) {
        self.entries.entry(name.to_string()).or_default().cpu = Some(Arc::new(function));
    }

    /// Registers (or replaces) the CUDA C source of `name`; the source must
    /// define an `extern "C" __global__` function of that name. It is
    /// compiled by NVRTC for the device's architecture on first use.
    pub fn register_cuda_source(&mut self, name: &str, source: impl Into<Arc<str>>) {
        self.entries.entry(name.to_string()).or_default().cuda_source = Some(source.into());
    }

    /// Registers (or replaces) `name` on CUDA as a call into a vendor
    /// library (cuBLASLt for [`LibraryCall::Gemm`]), loaded at run time like
    /// the driver; it takes precedence over CUDA source of the same name.
    /// The dispatch's arguments follow the call's documented order.
    pub fn register_cuda_library(&mut self, name: &str, call: LibraryCall) {
        self.entries.entry(name.to_string()).or_default().cuda_library = Some(call);
    }

    /// Declares (or replaces) the format of the weights or data kernel
    /// `name` reads: a block format's lowercase name (`q4_k`, as
    /// [`QuantFormat::name`](crate::quant::QuantFormat::name) gives) or a
    /// dense dtype (`bf16`, `f16`, `f32`). Every record of its dispatches
    /// carries it ([`DispatchRecord::format`](crate::profile::DispatchRecord::format)).
    /// A kernel that reads no format in particular (a copy of bytes)
    /// declares none.
    pub fn register_format(&mut self, name: &str, format: &str) {
        self.formats.insert(name.to_string(), Arc::from(format));
    }

    /// The format kernel `name` was declared to read, if any.
    pub fn format(&self, name: &str) -> Option<&str> {
        self.formats.get(name).map(|format| &**format)
    }

    /// Every registered kernel's name, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.entries.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// Whether `name` is registered for any backend.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The CUDA source registered for `name`, if any.
    pub fn cuda_source(&self, name: &str) -> Option<&str> {
        self.entries
            .get(name)
            .and_then(|entry| entry.cuda_source.as_deref())
    }

    /// Every kernel registered with CUDA source, sorted by name, with its
    /// source: what NVRTC compiles for it on a GPU (once per distinct
    /// source). A name that is also a library call
    /// ([`register_cuda_library`](Self::register_cuda_library)) is listed
    /// too, though the call is what runs. `tests/nvrtc_compile.rs` compiles
    /// them all without a GPU.
    pub fn cuda_sources(&self) -> Vec<(&str, &str)> {
        let mut sources: Vec<(&str, &str)> = self
            .entries
            .iter()
            .filter_map(|(name, entry)| Some((name.as_str(), entry.cuda_source.as_deref()?)))
            .collect();
        sources.sort_unstable_by_key(|(name, _)| *name);
        sources
    }

    /// The kernel `name`, ready for `device`.
    pub fn kernel(&self, device: &Device, name: &str) -> Result<Kernel> {
        let sources = self.entries.get(name).ok_or_else(|| {
            let mut known: Vec<&str> = self.entries.keys().map(String::as_str).collect();
            known.sort_unstable();
            Error::KernelMissing {
                name: name.to_string(),
                backend: device.backend(),
                workaround: format!(
                    "no kernel of that name is registered (registered: {})",
                    known.join(", ")
                ),
                remedies: &[],
            }
        })?;
        let loaded = device.backend_ref().load_kernel(name, sources)?;
        Ok(Kernel::new(name, self.formats.get(name).cloned(), loaded))
    }
}
