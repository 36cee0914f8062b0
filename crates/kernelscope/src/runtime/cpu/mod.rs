//! The CPU backend: the reference every GPU kernel is checked against, and
//! the default where no GPU is present. Its queue runs the committed
//! dispatches in order on the committing thread, one at a time under the
//! device's execution lock; kernels parallelise internally where it pays.
//! Barriers order nothing on an in-order queue, but are still counted where
//! the encoder issues them, so counters read the same on every backend.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use super::buffer::{Buffer, Memory};
use super::encoder::{Command, GraphNode, RecordedDispatch};
use super::kernel::KernelArgs;
use super::{DType, Element};
use crate::error::{Error, Result};
use crate::profile::{Counters, DispatchTiming, ProfileLevel, Profiler, SubmissionRecord, TimingMechanism};

/// State shared by a CPU device and every buffer allocated on it.
#[derive(Debug)]
pub(crate) struct CpuShared {
    name: String,
    profiler: Profiler,
    /// Held while kernels run and while the host copies in or out, so a
    /// kernel's exclusive view of its output is never observed half-written.
    execution: Mutex<()>,
}

impl CpuShared {
    fn lock_execution(&self) -> MutexGuard<'_, ()> {
        crate::sync::lock(&self.execution)
    }
}

/// The host's available and total memory from `/proc/meminfo` (Linux);
/// `None` elsewhere or when the file cannot be read.
pub(crate) fn host_memory_info() -> Option<super::device::MemoryInfo> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|line| line.starts_with(name))?;
        let kibibytes: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        kibibytes.checked_mul(1024)
    };
    Some(super::device::MemoryInfo {
        free: field("MemAvailable:")?,
        total: field("MemTotal:")?,
    })
}

/// A CPU device handle (cheap to clone).
#[derive(Clone, Debug)]
pub struct CpuDevice {
    shared: Arc<CpuShared>,
}

impl CpuDevice {
    pub(crate) fn new(level: ProfileLevel, dispatch_timing_unsupported: Option<String>) -> Self {
        let dispatch_timing = match dispatch_timing_unsupported {
            None => DispatchTiming::supported(TimingMechanism::HostClock),
            Some(reason) => DispatchTiming::Unsupported { reason },
        };
        CpuDevice {
            shared: Arc::new(CpuShared {
                name: cpu_name(),
                profiler: Profiler::new(level, dispatch_timing),
                execution: Mutex::new(()),
            }),
        }
    }

    /// The device's name: the processor model and thread count.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub(crate) fn profiler(&self) -> &Profiler {
        &self.shared.profiler
    }

    pub(crate) fn same_device(&self, other: &CpuDevice) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    pub(crate) fn owns(&self, buffer: &Buffer) -> bool {
        match &buffer.memory {
            Memory::Cpu(memory) => Arc::ptr_eq(&memory.shared, &self.shared),
            Memory::Cuda(_) => false,
        }
    }

    pub(crate) fn alloc(&self, dtype: DType, shape: &[usize]) -> Result<Buffer> {
        let elements: usize = shape.iter().product();
        let byte_len = elements
            .checked_mul(dtype.size_in_bytes())
            .ok_or_else(|| Error::OutOfBounds {
                context: format!("allocation of shape {shape:?}"),
                start: 0,
                end: usize::MAX,
                available: usize::MAX,
            })?;
        let memory =
            CpuMemory::zeroed(self.shared.clone(), byte_len).ok_or_else(|| Error::AllocationTooLarge {
                dtype,
                shape: shape.to_vec(),
            })?;
        Ok(Buffer::new(Memory::Cpu(Arc::new(memory)), dtype, shape.to_vec()))
    }

    /// A buffer over `byte_len` bytes of `map` at `byte_offset`, without
    /// copying (read-only).
    pub(crate) fn map(
        &self,
        map: Arc<memmap2::Mmap>,
        byte_offset: usize,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Buffer> {
        let byte_len = shape.iter().product::<usize>() * dtype.size_in_bytes();
        let end = byte_offset.saturating_add(byte_len);
        if end > map.len() {
            return Err(Error::OutOfBounds {
                context: "buffer over a mapped file".into(),
                start: byte_offset,
                end,
                available: map.len(),
            });
        }
        let memory = CpuMemory::mapped(self.shared.clone(), map, byte_offset, byte_len);
        Ok(Buffer::new(Memory::Cpu(Arc::new(memory)), dtype, shape.to_vec()))
    }

    /// Runs `commands` in order, timing them as the profiler asks.
    pub(crate) fn execute(&self, commands: &[Command], label: &Arc<str>) -> Result<()> {
        let profiler = &self.shared.profiler;
        let time_submission = profiler.times_submissions();
        let time_dispatches = profiler.times_dispatches();
        let _exclusive = self.shared.lock_execution();
        let submission = if time_submission {
            profiler.next_submission_id()
        } else {
            0
        };
        let start_ns = if time_submission { profiler.now_ns() } else { 0 };
        let mut records = Vec::new();
        let mut index = 0u32;
        // Barriers order nothing on this in-order queue; replays run their
        // recorded dispatches in order.
        let dispatches =
            commands
                .iter()
                .flat_map(|command| -> Box<dyn Iterator<Item = &Arc<RecordedDispatch>>> {
                    match command {
                        Command::Dispatch(recorded) => Box::new(std::iter::once(recorded)),
                        Command::Barrier => Box::new(std::iter::empty()),
                        Command::Replay(graph) => {
                            Box::new(graph.nodes().iter().filter_map(|node| match node {
                                GraphNode::Dispatch { recorded, .. } => Some(recorded),
                                GraphNode::Barrier { .. } => None,
                            }))
                        }
                    }
                });
        for recorded in dispatches {
            let dispatch_start = if time_dispatches { profiler.now_ns() } else { 0 };
            let kernel = recorded.dispatch.kernel();
            let function = kernel.cpu_function().ok_or_else(|| Error::KernelMissing {
                name: kernel.name().to_string(),
                backend: "cpu",
                workaround: "this kernel handle was made for another backend; get it from the registry for this device".into(),
            })?;
            function(&KernelArgs::new(kernel.name(), recorded.dispatch.args()))?;
            if time_dispatches {
                let end = profiler.now_ns();
                records.push(
                    recorded
                        .meta
                        .record(label, submission, index, None, dispatch_start, end),
                );
            }
            index += 1;
        }
        if time_submission {
            let record = SubmissionRecord {
                label: label.clone(),
                submission,
                stream: 0,
                token: None,
                start_ns,
                end_ns: profiler.now_ns(),
                dispatches: index,
                enqueue: None,
            };
            profiler.record_submission(record, records);
        }
        Ok(())
    }
}

/// What owns the bytes of a CPU allocation.
enum Backing {
    /// A heap allocation of `words` u64s (8-byte aligned, so any dtype view is aligned).
    Owned { words: usize },
    /// Part of a read-only memory-mapped file (weights), shared, never copied.
    Mapped(#[allow(dead_code)] Arc<memmap2::Mmap>),
}

/// Host memory of one CPU allocation.
pub(crate) struct CpuMemory {
    shared: Arc<CpuShared>,
    pointer: NonNull<u8>,
    byte_len: usize,
    backing: Backing,
}

// SAFETY: the bytes are a heap allocation owned by this struct or a mapping
// it keeps alive; every access happens under the owning device's execution
// lock (kernels via `execute`, the host via `read`/`write`), which
// serialises them, and mapped bytes are never written.
unsafe impl Send for CpuMemory {}
// SAFETY: as above: shared references only hand out access under the lock.
unsafe impl Sync for CpuMemory {}

impl Drop for CpuMemory {
    fn drop(&mut self) {
        if let Backing::Owned { words } = self.backing {
            // SAFETY: `pointer` and `words` come from `Box::<[u64]>::into_raw`
            // in `zeroed` and are dropped exactly once, here.
            unsafe {
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    self.pointer.as_ptr() as *mut u64,
                    words,
                )));
            }
        }
    }
}

impl std::fmt::Debug for CpuMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.backing {
            Backing::Owned { .. } => "owned",
            Backing::Mapped(_) => "mapped",
        };
        write!(f, "CpuMemory({kind}, {} bytes)", self.byte_len)
    }
}

impl CpuMemory {
    /// `None` when the host cannot allocate it (an error, not the abort
    /// `vec!` would give).
    fn zeroed(shared: Arc<CpuShared>, byte_len: usize) -> Option<Self> {
        let words = byte_len.div_ceil(8);
        let mut vector: Vec<u64> = Vec::new();
        vector.try_reserve_exact(words).ok()?;
        vector.resize(words, 0);
        let boxed: Box<[u64]> = vector.into_boxed_slice();
        let pointer = NonNull::new(Box::into_raw(boxed) as *mut u8).expect("Box pointers are never null");
        Some(CpuMemory {
            shared,
            pointer,
            byte_len,
            backing: Backing::Owned { words },
        })
    }

    fn mapped(shared: Arc<CpuShared>, map: Arc<memmap2::Mmap>, byte_offset: usize, byte_len: usize) -> Self {
        // SAFETY: the caller checked byte_offset + byte_len <= map.len().
        let pointer = unsafe { map.as_ptr().add(byte_offset) } as *mut u8;
        let pointer = NonNull::new(pointer).expect("mapped pointers are never null");
        CpuMemory {
            shared,
            pointer,
            byte_len,
            backing: Backing::Mapped(map),
        }
    }

    pub(crate) fn byte_len(&self) -> usize {
        self.byte_len
    }

    pub(crate) fn base_address(&self) -> usize {
        self.pointer.as_ptr() as usize
    }

    pub(crate) fn device_name(&self) -> &str {
        &self.shared.name
    }

    pub(crate) fn counters(&self) -> &Counters {
        self.shared.profiler.counters()
    }

    fn check_range<T: Element>(&self, byte_offset: usize, len: usize) -> Result<()> {
        let end = byte_offset + len * std::mem::size_of::<T>();
        let address = self.pointer.as_ptr() as usize + byte_offset;
        if end > self.byte_len || !address.is_multiple_of(std::mem::align_of::<T>()) {
            return Err(Error::OutOfBounds {
                context: format!("{} view of a CPU allocation", T::DTYPE),
                start: byte_offset,
                end,
                available: self.byte_len,
            });
        }
        Ok(())
    }

    /// A shared view of `len` elements at `byte_offset`.
    ///
    /// # Safety
    /// The caller holds the device's execution lock and no mutable view of
    /// these bytes exists for the returned lifetime.
    pub(crate) unsafe fn view<T: Element>(&self, byte_offset: usize, len: usize) -> Result<&[T]> {
        self.check_range::<T>(byte_offset, len)?;
        // SAFETY: in bounds and aligned (checked above); exclusivity is the
        // caller's contract.
        Ok(unsafe { std::slice::from_raw_parts(self.pointer.as_ptr().add(byte_offset) as *const T, len) })
    }

    /// An exclusive view of `len` elements at `byte_offset`.
    ///
    /// # Safety
    /// The caller holds the device's execution lock and no other view of
    /// these bytes exists for the returned lifetime.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn view_mut<T: Element>(&self, byte_offset: usize, len: usize) -> Result<&mut [T]> {
        self.check_range::<T>(byte_offset, len)?;
        if matches!(self.backing, Backing::Mapped(_)) {
            return Err(Error::ReadOnly {
                context: format!("{} view of memory-mapped weights", T::DTYPE),
            });
        }
        // SAFETY: in bounds and aligned (checked above); owned, so writable;
        // exclusivity is the caller's contract.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.pointer.as_ptr().add(byte_offset) as *mut T, len) })
    }

    pub(crate) fn read<T: Element>(&self, byte_offset: usize, len: usize) -> Result<Vec<T>> {
        let _exclusive = self.shared.lock_execution();
        // SAFETY: the execution lock is held, so no kernel holds a view.
        Ok(unsafe { self.view::<T>(byte_offset, len)? }.to_vec())
    }

    pub(crate) fn write_bytes(&self, byte_offset: usize, data: &[u8]) -> Result<()> {
        let _exclusive = self.shared.lock_execution();
        // u32 views need 4-byte alignment, which byte copies do not; go
        // through the raw pointer after the same bounds and writability checks.
        if byte_offset + data.len() > self.byte_len {
            return Err(Error::OutOfBounds {
                context: "byte copy into a CPU allocation".into(),
                start: byte_offset,
                end: byte_offset + data.len(),
                available: self.byte_len,
            });
        }
        if matches!(self.backing, Backing::Mapped(_)) {
            return Err(Error::ReadOnly {
                context: "byte copy into memory-mapped weights".into(),
            });
        }
        // SAFETY: in bounds (checked), owned memory (checked), and the
        // execution lock is held so no kernel holds a view of it.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.pointer.as_ptr().add(byte_offset), data.len());
        }
        Ok(())
    }

    pub(crate) fn write<T: Element>(&self, byte_offset: usize, data: &[T]) -> Result<()> {
        let _exclusive = self.shared.lock_execution();
        // SAFETY: the execution lock is held, so no kernel holds a view.
        unsafe { self.view_mut::<T>(byte_offset, data.len())? }.copy_from_slice(data);
        Ok(())
    }
}

/// `cpu: <model name> (<n> threads)`, from /proc/cpuinfo where there is one.
fn cpu_name() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split(':').nth(1))
                .map(|name| name.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("cpu: {model} ({threads} threads)")
}
