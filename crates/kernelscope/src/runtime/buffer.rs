//! Typed device memory. A [`Buffer`] is a handle (cheap to clone) on an
//! allocation plus a dtype, a shape and a byte offset; slice views share the
//! allocation and keep their offset wherever they are bound, in eager
//! dispatches and in captured graphs alike.

use std::fmt;
use std::sync::Arc;

use super::memory::{DeviceMemory, PendingBytes};
use super::{DType, Element, MemRange};
use crate::error::{Error, Result};
use crate::profile::Counters;

/// Typed memory on a device: an allocation, a dtype, a shape and a byte offset.
#[derive(Clone)]
pub struct Buffer {
    memory: Arc<dyn DeviceMemory>,
    dtype: DType,
    shape: Vec<usize>,
    byte_offset: usize,
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("device", &self.device_name())
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("byte_offset", &self.byte_offset)
            .finish()
    }
}

impl Buffer {
    pub(crate) fn new(memory: Arc<dyn DeviceMemory>, dtype: DType, shape: Vec<usize>) -> Self {
        Buffer {
            memory,
            dtype,
            shape,
            byte_offset: 0,
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape (row-major).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes covered by this view.
    pub fn byte_len(&self) -> usize {
        self.len() * self.dtype.size_in_bytes()
    }

    /// Where this view starts inside its allocation.
    pub fn byte_offset(&self) -> usize {
        self.byte_offset
    }

    /// Size of the whole allocation in bytes.
    pub fn allocation_len(&self) -> usize {
        self.memory.byte_len()
    }

    /// The absolute addresses this view covers, for conflict tracking.
    pub fn address_range(&self) -> MemRange {
        let start = self.memory.base_address() + self.byte_offset;
        MemRange::new(start, start + self.byte_len())
    }

    /// Whether two buffers share an allocation.
    pub fn same_allocation(&self, other: &Buffer) -> bool {
        Arc::ptr_eq(&self.memory, &other.memory)
    }

    /// The name of the device that owns the allocation.
    pub fn device_name(&self) -> &str {
        self.memory.device_name()
    }

    /// The allocation, for the backend that owns it.
    pub(crate) fn memory(&self) -> &dyn DeviceMemory {
        &*self.memory
    }

    /// A 1-D view of `len` elements starting at element `start` of this view.
    /// The view keeps its byte offset wherever it is bound.
    pub fn slice(&self, start: usize, len: usize) -> Result<Buffer> {
        let end = start.saturating_add(len);
        if end > self.len() {
            return Err(Error::OutOfBounds {
                context: format!("slice of a {:?} {} buffer", self.shape, self.dtype),
                start,
                end,
                available: self.len(),
            });
        }
        Ok(Buffer {
            memory: self.memory.clone(),
            dtype: self.dtype,
            shape: vec![len],
            byte_offset: self.byte_offset + start * self.dtype.size_in_bytes(),
        })
    }

    /// The same elements under another shape with as many elements.
    pub fn reshape(&self, shape: &[usize]) -> Result<Buffer> {
        if shape.iter().product::<usize>() != self.len() {
            return Err(Error::ShapeMismatch {
                context: format!("reshape of a {} buffer", self.dtype),
                expected: self.shape.clone(),
                found: shape.to_vec(),
            });
        }
        Ok(Buffer {
            shape: shape.to_vec(),
            ..self.clone()
        })
    }

    /// The same bytes viewed as `dtype` (a 1-D view); the byte length and
    /// offset must be whole multiples of the new element size.
    pub fn reinterpret(&self, dtype: DType) -> Result<Buffer> {
        let size = dtype.size_in_bytes();
        if !self.byte_len().is_multiple_of(size) || !self.byte_offset.is_multiple_of(size) {
            return Err(Error::ShapeMismatch {
                context: format!(
                    "viewing {} bytes at offset {} as {dtype}",
                    self.byte_len(),
                    self.byte_offset
                ),
                expected: vec![self.byte_len().div_ceil(size)],
                found: vec![self.byte_len()],
            });
        }
        Ok(Buffer {
            dtype,
            shape: vec![self.byte_len() / size],
            ..self.clone()
        })
    }

    fn check_dtype<T: Element>(&self, context: &str) -> Result<()> {
        if T::DTYPE == self.dtype {
            Ok(())
        } else {
            Err(Error::DTypeMismatch {
                context: context.to_string(),
                expected: self.dtype,
                found: T::DTYPE,
            })
        }
    }

    fn counters(&self) -> &Counters {
        self.memory.counters()
    }

    /// Copies the view's elements to the host. The host waits for the
    /// device's queue first, so this counts one host-device copy and one sync.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.check_dtype::<T>("Buffer::to_vec")?;
        Counters::add(&self.counters().host_device_copies, 1);
        Counters::add(&self.counters().syncs, 1);
        let mut values = vec![T::zeroed(); self.len()];
        self.memory
            .read_bytes(self.byte_offset, bytemuck::cast_slice_mut(&mut values))?;
        Ok(values)
    }

    /// Starts copying the view to the host behind the work committed so far
    /// and returns at once, so the host can queue more work before it waits
    /// ([`PendingRead::wait`]) for the values: a decode loop reads token N
    /// back while token N+1 already runs. Counts one host-device copy now
    /// and one sync at the wait. On the CPU the values are read at once.
    pub fn read_later<T: Element>(&self) -> Result<PendingRead<T>> {
        self.check_dtype::<T>("Buffer::read_later")?;
        Counters::add(&self.counters().host_device_copies, 1);
        let pending = self.memory.read_later(self.byte_offset, self.byte_len())?;
        Ok(PendingRead {
            pending,
            memory: self.memory.clone(),
            len: self.len(),
            element: std::marker::PhantomData,
        })
    }

    /// Copies raw little-endian bytes from the host into the view (exactly
    /// [`byte_len`](Self::byte_len) of them). Counts one host-device copy.
    pub fn write_bytes(&self, data: &[u8]) -> Result<()> {
        if data.len() != self.byte_len() {
            return Err(Error::ShapeMismatch {
                context: format!("Buffer::write_bytes into {} {:?}", self.dtype, self.shape),
                expected: vec![self.byte_len()],
                found: vec![data.len()],
            });
        }
        Counters::add(&self.counters().host_device_copies, 1);
        self.memory.write_bytes(self.byte_offset, data)
    }

    /// Copies `data` from the host into the view; `data` must have exactly
    /// as many elements. Counts one host-device copy.
    pub fn write_from<T: Element>(&self, data: &[T]) -> Result<()> {
        self.check_dtype::<T>("Buffer::write_from")?;
        if data.len() != self.len() {
            return Err(Error::ShapeMismatch {
                context: "Buffer::write_from".to_string(),
                expected: self.shape.clone(),
                found: vec![data.len()],
            });
        }
        Counters::add(&self.counters().host_device_copies, 1);
        self.memory
            .write_bytes(self.byte_offset, bytemuck::cast_slice(data))
    }
}

/// A device-to-host copy in flight, started by [`Buffer::read_later`].
/// Dropping it without waiting still waits for the copy (its staging memory
/// is reused), so nothing is left writing into freed memory.
pub struct PendingRead<T: Element> {
    pending: Box<dyn PendingBytes>,
    memory: Arc<dyn DeviceMemory>,
    len: usize,
    element: std::marker::PhantomData<T>,
}

impl<T: Element> PendingRead<T> {
    /// Waits for the copy and returns the values (one counted sync). On
    /// CUDA, submissions that have finished by then get their times.
    pub fn wait(self) -> Result<Vec<T>> {
        Counters::add(&self.memory.counters().syncs, 1);
        let mut values = vec![T::zeroed(); self.len];
        self.pending.wait(bytemuck::cast_slice_mut(&mut values))?;
        Ok(values)
    }
}

impl<T: Element> fmt::Debug for PendingRead<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingRead").field("len", &self.len).finish()
    }
}
