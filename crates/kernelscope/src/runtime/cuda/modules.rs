//! The device's module cache: each kernel source is compiled (or read from
//! the disk cache, see `compile.rs`) and loaded once per device, keyed like
//! the disk cache, and every kernel of it is looked up in the loaded module.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};

use super::compile;
use super::driver::driver_error;
use crate::error::{Error, Result};
use crate::runtime::LibraryCall;

/// A kernel ready on one CUDA device: compiled from our source, or a call
/// into a library that launches kernels of its own.
#[derive(Clone)]
pub(crate) enum CudaKernel {
    /// Our kernel, loaded from its module.
    Compiled {
        function: CudaFunction,
        /// Whether a graph may launch it before its predecessor finishes:
        /// the device has programmatic dependent launch on and the kernel's
        /// source begins by waiting (`runtime::early_launch`).
        early_launch: bool,
    },
    /// A library call (see `blas.rs`).
    Library(LibraryCall),
    /// A collective of one rank of an NCCL group (see `nccl.rs`).
    Collective {
        group: Arc<super::nccl::NcclGroup>,
        rank: usize,
        collective: crate::runtime::collective::group::Collective,
        dtype: crate::runtime::DType,
    },
}

/// Loaded modules by source key.
#[derive(Default)]
pub(crate) struct ModuleCache {
    modules: Mutex<HashMap<u64, Arc<CudaModule>>>,
}

impl ModuleCache {
    /// The kernel `name` of `source`, compiled for `arch` and loaded into
    /// `context` (bound by the caller) on first use; launched early in
    /// graphs where `early_launch` and its source allow.
    pub(crate) fn kernel(
        &self,
        context: &Arc<CudaContext>,
        arch: &'static str,
        name: &str,
        source: &str,
        early_launch: bool,
    ) -> Result<CudaKernel> {
        let key = compile::source_key(source, arch);
        let module = {
            let mut modules = crate::sync::lock(&self.modules);
            match modules.get(&key) {
                Some(module) => module.clone(),
                None => {
                    let module = load(context, arch, name, source, key)?;
                    modules.insert(key, module.clone());
                    module
                }
            }
        };
        let function = module.load_function(name).map_err(|error| Error::KernelMissing {
            name: name.to_string(),
            backend: "cuda",
            workaround: format!("its CUDA source defines no `extern \"C\" __global__ {name}` ({error})"),
        })?;
        Ok(CudaKernel::Compiled {
            function,
            early_launch: early_launch && crate::runtime::early_launch::begins_by_waiting(source, name),
        })
    }
}

/// Loads the module of `source`, from the disk cache when the driver takes it.
fn load(
    context: &Arc<CudaContext>,
    arch: &'static str,
    name: &str,
    source: &str,
    key: u64,
) -> Result<Arc<CudaModule>> {
    let ptx = compile::compile(name, source, arch, key, true)?;
    match context.load_module(ptx) {
        Ok(module) => Ok(module),
        // A cached file the driver rejects (damaged, or from another
        // driver): compile afresh, which rewrites it.
        Err(_) => {
            let ptx = compile::compile(name, source, arch, key, false)?;
            context.load_module(ptx).map_err(driver_error("loading a module"))
        }
    }
}
