//! Kernels and the registry that hands them out per device. A kernel is
//! registered once under a name with an implementation per backend (a Rust
//! function for the CPU, CUDA C source for NVRTC); asking for it on a
//! backend it lacks is an error naming the workaround, never a fallback.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::buffer::Memory;
use super::cuda::CudaKernel;
use super::{Access, Arg, Device, Element, Param};
use crate::error::{Error, Result};

/// A CPU kernel: reads and writes its arguments through [`KernelArgs`].
pub type CpuKernelFn = Arc<dyn Fn(&KernelArgs<'_>) -> Result<()> + Send + Sync>;

#[derive(Clone)]
enum Implementation {
    Cpu(CpuKernelFn),
    Cuda(CudaKernel),
}

struct KernelInner {
    name: Arc<str>,
    implementation: Implementation,
}

/// A kernel ready to dispatch on one backend (cheap to clone).
#[derive(Clone)]
pub struct Kernel(Arc<KernelInner>);

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kernel({})", self.0.name)
    }
}

impl Kernel {
    /// The registered name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    pub(crate) fn shared_name(&self) -> Arc<str> {
        self.0.name.clone()
    }

    pub(crate) fn cpu_function(&self) -> Option<&CpuKernelFn> {
        match &self.0.implementation {
            Implementation::Cpu(function) => Some(function),
            Implementation::Cuda(_) => None,
        }
    }

    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn cuda_function(&self) -> Option<&CudaKernel> {
        match &self.0.implementation {
            Implementation::Cuda(function) => Some(function),
            Implementation::Cpu(_) => None,
        }
    }
}

#[derive(Default, Clone)]
struct Entry {
    cpu: Option<CpuKernelFn>,
    cuda_source: Option<Arc<str>>,
}

/// Kernels by name, each with an implementation per backend.
#[derive(Default, Clone)]
pub struct KernelRegistry {
    entries: HashMap<String, Entry>,
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

    /// The kernel `name`, ready for `device`.
    pub fn kernel(&self, device: &Device, name: &str) -> Result<Kernel> {
        let entry = self.entries.get(name).ok_or_else(|| {
            let mut known: Vec<&str> = self.entries.keys().map(String::as_str).collect();
            known.sort_unstable();
            Error::KernelMissing {
                name: name.to_string(),
                backend: device.backend(),
                workaround: format!(
                    "no kernel of that name is registered (registered: {})",
                    known.join(", ")
                ),
            }
        })?;
        let implementation = match device {
            Device::Cpu(_) => Implementation::Cpu(entry.cpu.clone().ok_or_else(|| Error::KernelMissing {
                name: name.to_string(),
                backend: "cpu",
                workaround: "register one with KernelRegistry::register_cpu, or run on --device cuda".into(),
            })?),
            Device::Cuda(cuda) => {
                let source = entry.cuda_source.as_deref().ok_or_else(|| Error::KernelMissing {
                    name: name.to_string(),
                    backend: "cuda",
                    workaround: "register its source with KernelRegistry::register_cuda_source, or run on --device cpu".into(),
                })?;
                Implementation::Cuda(cuda.kernel(name, source)?)
            }
        };
        Ok(Kernel(Arc::new(KernelInner {
            name: Arc::from(name),
            implementation,
        })))
    }
}

/// A CPU kernel's view of its arguments, by position. Read-only buffers are
/// shared slices; written buffers are exclusive slices, each handed out at
/// most once per run (the encoder has already checked that no written range
/// overlaps any other argument).
pub struct KernelArgs<'a> {
    kernel: &'a str,
    args: &'a [Arg],
    handed_out: Cell<u64>,
}

impl<'a> KernelArgs<'a> {
    pub(crate) fn new(kernel: &'a str, args: &'a [Arg]) -> Self {
        KernelArgs {
            kernel,
            args,
            handed_out: Cell::new(0),
        }
    }

    fn problem(&self, index: usize, problem: impl Into<String>) -> Error {
        Error::KernelArgument {
            kernel: self.kernel.to_string(),
            index,
            problem: problem.into(),
        }
    }

    /// How many arguments there are.
    pub fn len(&self) -> usize {
        self.args.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.args.is_empty()
    }

    fn buffer<T: Element>(&self, index: usize) -> Result<(&'a super::Buffer, Access)> {
        match self.args.get(index) {
            Some(Arg::Buffer { buffer, access }) => {
                if buffer.dtype() != T::DTYPE {
                    return Err(self.problem(
                        index,
                        format!(
                            "the kernel reads it as {} but the buffer holds {}",
                            T::DTYPE,
                            buffer.dtype()
                        ),
                    ));
                }
                Ok((buffer, *access))
            }
            Some(Arg::Scalar(_)) => Err(self.problem(index, "expected a buffer, found a scalar")),
            None => Err(self.problem(
                index,
                format!("missing: the dispatch has {} arguments", self.args.len()),
            )),
        }
    }

    /// The read-only buffer at `index` as a slice of `T`.
    pub fn input<T: Element>(&self, index: usize) -> Result<&'a [T]> {
        let (buffer, access) = self.buffer::<T>(index)?;
        if access != Access::Read {
            return Err(self.problem(index, "it is bound for writing; use output()"));
        }
        match &buffer.memory {
            // SAFETY: the queue runs this kernel under the device's execution
            // lock, and read-only arguments never overlap written ones
            // (checked when the dispatch was encoded).
            Memory::Cpu(memory) => unsafe { memory.view::<T>(buffer.byte_offset(), buffer.len()) },
            Memory::Cuda(_) => Err(self.problem(index, "a GPU buffer cannot be read by a CPU kernel")),
        }
    }

    /// The written (or read-written) buffer at `index` as an exclusive slice
    /// of `T`. Each output can be taken once per run.
    #[allow(clippy::mut_from_ref)]
    pub fn output<T: Element>(&self, index: usize) -> Result<&'a mut [T]> {
        let (buffer, access) = self.buffer::<T>(index)?;
        if access == Access::Read {
            return Err(self.problem(index, "it is bound read-only; use input()"));
        }
        let bit = 1u64
            .checked_shl(index as u32)
            .filter(|_| index < 64)
            .ok_or_else(|| self.problem(index, "kernels may take at most 64 arguments"))?;
        if self.handed_out.get() & bit != 0 {
            return Err(self.problem(index, "output() was already taken for this argument"));
        }
        self.handed_out.set(self.handed_out.get() | bit);
        match &buffer.memory {
            // SAFETY: execution lock held by the queue; no other argument
            // overlaps a written one (checked at encode time); and this is the
            // only exclusive slice of it (the bit above).
            Memory::Cpu(memory) => unsafe { memory.view_mut::<T>(buffer.byte_offset(), buffer.len()) },
            Memory::Cuda(_) => Err(self.problem(index, "a GPU buffer cannot be written by a CPU kernel")),
        }
    }

    /// The shape of the buffer at `index`.
    pub fn shape(&self, index: usize) -> Result<&'a [usize]> {
        match self.args.get(index) {
            Some(Arg::Buffer { buffer, .. }) => Ok(buffer.shape()),
            _ => Err(self.problem(index, "expected a buffer")),
        }
    }

    fn scalar(&self, index: usize) -> Result<Param> {
        match self.args.get(index) {
            Some(Arg::Scalar(param)) => Ok(*param),
            Some(Arg::Buffer { .. }) => Err(self.problem(index, "expected a scalar, found a buffer")),
            None => Err(self.problem(
                index,
                format!("missing: the dispatch has {} arguments", self.args.len()),
            )),
        }
    }

    /// The `u32` scalar at `index`.
    pub fn u32(&self, index: usize) -> Result<u32> {
        match self.scalar(index)? {
            Param::U32(value) => Ok(value),
            other => Err(self.problem(index, format!("expected u32, found {other:?}"))),
        }
    }

    /// The `i32` scalar at `index`.
    pub fn i32(&self, index: usize) -> Result<i32> {
        match self.scalar(index)? {
            Param::I32(value) => Ok(value),
            other => Err(self.problem(index, format!("expected i32, found {other:?}"))),
        }
    }

    /// The `f32` scalar at `index`.
    pub fn f32(&self, index: usize) -> Result<f32> {
        match self.scalar(index)? {
            Param::F32(value) => Ok(value),
            other => Err(self.problem(index, format!("expected f32, found {other:?}"))),
        }
    }

    /// The `u64` scalar at `index`.
    pub fn u64(&self, index: usize) -> Result<u64> {
        match self.scalar(index)? {
            Param::U64(value) => Ok(value),
            other => Err(self.problem(index, format!("expected u64, found {other:?}"))),
        }
    }
}
