//! The memory contract: what a backend's allocation offers the neutral
//! [`Buffer`](super::Buffer) (bounds, addresses, byte copies in and out, and
//! reads that finish later). Backends reach their own allocation type again
//! through [`DeviceMemory::as_any`] where a kernel needs it (a CPU kernel's
//! slices, a GPU launch's device pointer); nothing else looks inside.

use std::any::Any;
use std::fmt;

use crate::error::Result;
use crate::profile::Counters;

/// A device's memory, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Free now (for the CPU: what the kernel reports as available).
    pub free: u64,
    /// In all.
    pub total: u64,
}

/// One allocation on a device.
pub(crate) trait DeviceMemory: Send + Sync + fmt::Debug {
    /// Size of the whole allocation in bytes.
    fn byte_len(&self) -> usize;
    /// Its first byte's address in the device's address space; ranges of
    /// it are what dataflow barriers and aliasing checks compare.
    fn base_address(&self) -> usize;
    /// The identity of the device that owns it (see [`Backend::identity`](super::backend::Backend::identity)).
    fn owner(&self) -> usize;
    /// The owning device's name, for errors.
    fn device_name(&self) -> &str;
    /// The owning device's counters (copies and syncs are counted by the buffer).
    fn counters(&self) -> &Counters;
    /// Copies `out.len()` bytes at `byte_offset` to the host, after all work
    /// committed before the call.
    fn read_bytes(&self, byte_offset: usize, out: &mut [u8]) -> Result<()>;
    /// Starts copying `bytes` bytes at `byte_offset` to the host behind the
    /// work committed so far and returns at once.
    fn read_later(&self, byte_offset: usize, bytes: usize) -> Result<Box<dyn PendingBytes>>;
    /// Copies `data` into the allocation at `byte_offset`, ordered after the
    /// work committed before the call.
    fn write_bytes(&self, byte_offset: usize, data: &[u8]) -> Result<()>;
    /// Copies bytes the caller knows no queued work still writes (a
    /// finished launch's stamps) without waiting for the queue: a GPU
    /// copies them while later work runs. The CPU's is `read_bytes`.
    fn read_settled(&self, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        self.read_bytes(byte_offset, out)
    }
    /// The backend's own type, for the backend.
    fn as_any(&self) -> &dyn Any;
}

/// A device-to-host copy in flight.
pub(crate) trait PendingBytes: Send {
    /// Waits for the copy and moves its bytes into `out` (exactly as many
    /// as were asked for).
    fn wait(self: Box<Self>, out: &mut [u8]) -> Result<()>;
}

/// A copy that was done at once (backends that run work as it is committed).
pub(crate) struct ReadyBytes(pub Vec<u8>);

impl PendingBytes for ReadyBytes {
    fn wait(self: Box<Self>, out: &mut [u8]) -> Result<()> {
        out.copy_from_slice(&self.0);
        Ok(())
    }
}
