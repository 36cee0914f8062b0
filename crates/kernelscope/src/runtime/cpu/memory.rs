//! Host memory of the CPU backend: owned, zeroed allocations and read-only
//! views of memory-mapped files (weights read in place). Every access goes
//! through the device's execution lock, which is what makes the kernels'
//! exclusive slices sound.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;

use super::shared::CpuShared;
use crate::error::{Error, Result};
use crate::profile::Counters;
use crate::runtime::Element;
use crate::runtime::memory::{DeviceMemory, MemoryInfo, PendingBytes, ReadyBytes};

/// The host's available and total memory from `/proc/meminfo` (Linux);
/// `None` elsewhere or when the file cannot be read.
pub(crate) fn host_memory_info() -> Option<MemoryInfo> {
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
    Some(MemoryInfo {
        free: field("MemAvailable:")?,
        total: field("MemTotal:")?,
    })
}

/// One cache line, the unit of owned allocations: every owned buffer starts
/// on a 64-byte boundary, so a kernel's 64-byte (AVX-512) loads of it never
/// straddle two lines, which costs a second load (measured: 3-5 % of the
/// bf16 GEMM for each misaligned operand).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct CacheLine([u8; 64]);

/// What owns the bytes of a CPU allocation.
enum Backing {
    /// A heap allocation of `lines` cache lines (so any dtype view is aligned).
    Owned { lines: usize },
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
        if let Backing::Owned { lines } = self.backing {
            // SAFETY: `pointer` and `lines` come from
            // `Box::<[CacheLine]>::into_raw` in `zeroed` and are dropped
            // exactly once, here.
            unsafe {
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    self.pointer.as_ptr() as *mut CacheLine,
                    lines,
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
    pub(super) fn zeroed(shared: Arc<CpuShared>, byte_len: usize) -> Option<Self> {
        let lines = byte_len.div_ceil(std::mem::size_of::<CacheLine>());
        let mut vector: Vec<CacheLine> = Vec::new();
        vector.try_reserve_exact(lines).ok()?;
        vector.resize(lines, CacheLine([0; 64]));
        let boxed: Box<[CacheLine]> = vector.into_boxed_slice();
        let pointer = NonNull::new(Box::into_raw(boxed) as *mut u8).expect("Box pointers are never null");
        Some(CpuMemory {
            shared,
            pointer,
            byte_len,
            backing: Backing::Owned { lines },
        })
    }

    pub(super) fn mapped(
        shared: Arc<CpuShared>,
        map: Arc<memmap2::Mmap>,
        byte_offset: usize,
        byte_len: usize,
    ) -> Self {
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

    /// Byte copies need no alignment, only bounds.
    fn check_bytes(&self, context: &str, byte_offset: usize, bytes: usize) -> Result<()> {
        let end = byte_offset.saturating_add(bytes);
        if end > self.byte_len {
            return Err(Error::OutOfBounds {
                context: context.into(),
                start: byte_offset,
                end,
                available: self.byte_len,
            });
        }
        Ok(())
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
}

impl DeviceMemory for CpuMemory {
    fn byte_len(&self) -> usize {
        self.byte_len
    }

    fn base_address(&self) -> usize {
        self.pointer.as_ptr() as usize
    }

    fn owner(&self) -> usize {
        Arc::as_ptr(&self.shared) as usize
    }

    fn device_name(&self) -> &str {
        self.shared.name()
    }

    fn counters(&self) -> &Counters {
        self.shared.profiler().counters()
    }

    fn read_bytes(&self, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        let _exclusive = self.shared.lock_execution();
        self.check_bytes("byte copy out of a CPU allocation", byte_offset, out.len())?;
        // SAFETY: in bounds (checked), and the execution lock is held, so
        // no kernel holds an exclusive view of these bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.pointer.as_ptr().add(byte_offset),
                out.as_mut_ptr(),
                out.len(),
            );
        }
        Ok(())
    }

    /// The CPU runs work as it is committed, so the bytes are there now.
    fn read_later(&self, byte_offset: usize, bytes: usize) -> Result<Box<dyn PendingBytes>> {
        let mut values = vec![0u8; bytes];
        self.read_bytes(byte_offset, &mut values)?;
        Ok(Box::new(ReadyBytes(values)))
    }

    fn write_bytes(&self, byte_offset: usize, data: &[u8]) -> Result<()> {
        let _exclusive = self.shared.lock_execution();
        self.check_bytes("byte copy into a CPU allocation", byte_offset, data.len())?;
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

    fn as_any(&self) -> &dyn Any {
        self
    }
}
