//! What a CPU kernel sees: its arguments by position, read-only buffers as
//! shared slices and written ones as exclusive slices, and its scalars.

use std::cell::Cell;
use std::sync::Arc;

use super::memory::CpuMemory;
use crate::error::{Error, Result};
use crate::runtime::{Access, Arg, Buffer, Element, Param};

/// A CPU kernel: reads and writes its arguments through [`KernelArgs`].
pub type CpuKernelFn = Arc<dyn Fn(&KernelArgs<'_>) -> Result<()> + Send + Sync>;

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

    fn cpu_memory(&self, index: usize, buffer: &'a Buffer) -> Result<&'a CpuMemory> {
        buffer
            .memory()
            .as_any()
            .downcast_ref::<CpuMemory>()
            .ok_or_else(|| self.problem(index, "a GPU buffer cannot be used by a CPU kernel"))
    }

    fn buffer<T: Element>(&self, index: usize) -> Result<(&'a Buffer, Access)> {
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
        let memory = self.cpu_memory(index, buffer)?;
        // SAFETY: the queue runs this kernel under the device's execution
        // lock, and read-only arguments never overlap written ones (checked
        // when the dispatch was encoded).
        unsafe { memory.view::<T>(buffer.byte_offset(), buffer.len()) }
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
        let memory = self.cpu_memory(index, buffer)?;
        // SAFETY: execution lock held by the queue; no other argument
        // overlaps a written one (checked at encode time); and this is the
        // only exclusive slice of it (the bit above).
        unsafe { memory.view_mut::<T>(buffer.byte_offset(), buffer.len()) }
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
