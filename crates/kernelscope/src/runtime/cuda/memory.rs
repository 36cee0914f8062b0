//! Device memory: one `cuMemAlloc` per buffer allocation, zeroed on the
//! device's stream like the CPU backend's allocations. Copies go through the
//! device's stream so they are ordered with the kernels; reads wait for the
//! stream first (a host sync).

use std::any::Any;
use std::sync::Arc;

use cudarc::driver::{result, sys};

use super::driver::{Event, Staging, allocation_error, driver_error};
use super::state::DeviceState;
use crate::error::{Error, Result};
use crate::profile::Counters;
use crate::runtime::memory::{DeviceMemory, PendingBytes};

/// One device allocation, or pinned host memory mapped into the device's
/// address space (`host_mapped`), which kernels write over the bus and the
/// host reads in place.
pub(crate) struct CudaMemory {
    state: Arc<DeviceState>,
    /// The address kernels use.
    pointer: sys::CUdeviceptr,
    byte_len: usize,
    /// The host's address of a mapped allocation.
    host: Option<usize>,
}

impl Drop for CudaMemory {
    fn drop(&mut self) {
        if self.state.bind().is_ok() {
            match self.host {
                // SAFETY: allocated by cuMemHostAlloc in `host_mapped` and
                // freed once; the device is synchronized first, as no
                // stream orders a host free after the kernels writing it.
                Some(host) => unsafe {
                    let _ = self.state.stream().synchronize();
                    let _ = sys::cuMemFreeHost(host as *mut std::ffi::c_void);
                },
                // SAFETY: allocated by malloc_sync in `zeroed` and freed
                // once; cuMemFree waits for work using it to finish.
                None => unsafe {
                    let _ = result::free_sync(self.pointer);
                },
            }
        }
    }
}

impl CudaMemory {
    pub(crate) fn zeroed(state: Arc<DeviceState>, byte_len: usize) -> Result<Self> {
        state.bind()?;
        // SAFETY: plain allocation of at least one byte (zero-sized ones are
        // refused by the driver), zeroed on our stream before any use.
        let pointer = unsafe { result::malloc_sync(byte_len.max(1)) }
            .map_err(allocation_error("allocating device memory", byte_len))?;
        // SAFETY: the range is the allocation just made.
        unsafe { result::memset_d8_async(pointer, 0, byte_len, state.stream().cu_stream()) }
            .map_err(driver_error("zeroing device memory"))?;
        Ok(CudaMemory {
            state,
            pointer,
            byte_len,
            host: None,
        })
    }

    /// `byte_len` zeroed bytes of pinned host memory the device reads and
    /// writes through its own address for them.
    pub(crate) fn host_mapped(state: Arc<DeviceState>, byte_len: usize) -> Result<Self> {
        state.bind()?;
        let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: `host` receives a fresh pinned allocation of at least one
        // byte, mapped for the device (CU_MEMHOSTALLOC_DEVICEMAP).
        unsafe { sys::cuMemHostAlloc(&mut host, byte_len.max(1), sys::CU_MEMHOSTALLOC_DEVICEMAP) }
            .result()
            .map_err(allocation_error("allocating mapped host memory", byte_len))?;
        // SAFETY: `host` is the allocation just made, `byte_len` bytes long.
        unsafe { std::ptr::write_bytes(host as *mut u8, 0, byte_len) };
        let mut pointer: sys::CUdeviceptr = 0;
        // SAFETY: `host` is a mapped pinned allocation; flags must be 0.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut pointer, host, 0) }
            .result()
            .map_err(driver_error("finding the device's address of mapped host memory"))?;
        Ok(CudaMemory {
            state,
            pointer,
            byte_len,
            host: Some(host as usize),
        })
    }

    fn check(&self, byte_offset: usize, bytes: usize) -> Result<()> {
        if byte_offset + bytes > self.byte_len {
            return Err(Error::OutOfBounds {
                context: "copy to or from device memory".into(),
                start: byte_offset,
                end: byte_offset + bytes,
                available: self.byte_len,
            });
        }
        Ok(())
    }

    /// Enqueues a copy of `bytes` at `byte_offset` into pinned staging
    /// memory, behind everything queued so far, and an event after it.
    fn start_read(&self, byte_offset: usize, bytes: usize) -> Result<CudaPendingRead> {
        self.check(byte_offset, bytes)?;
        self.state.bind()?;
        let stream = self.state.stream();
        let mut staging = stream.take_staging(bytes)?;
        // SAFETY: in bounds (checked); the staging block holds at least
        // `bytes` and stays out of the pool until the copy has completed
        // (`CudaPendingRead` waits for its event before giving it back).
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                staging.as_mut_ptr() as *mut std::ffi::c_void,
                self.pointer + byte_offset as u64,
                bytes,
                stream.cu_stream(),
            )
        }
        .result()
        .map_err(driver_error("copying device to host"))?;
        let done = stream.record_event()?;
        Ok(CudaPendingRead {
            state: self.state.clone(),
            staging: Some(staging),
            done: Some(done),
            bytes,
        })
    }
}

impl std::fmt::Debug for CudaMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaMemory({} bytes on {})", self.byte_len, self.state.name())
    }
}

impl DeviceMemory for CudaMemory {
    fn byte_len(&self) -> usize {
        self.byte_len
    }

    fn base_address(&self) -> usize {
        self.pointer as usize
    }

    fn owner(&self) -> usize {
        Arc::as_ptr(&self.state) as usize
    }

    fn device_name(&self) -> &str {
        self.state.name()
    }

    fn counters(&self) -> &Counters {
        self.state.profiler().counters()
    }

    fn read_bytes(&self, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(byte_offset, out.len())?;
        // Everything queued before the read must be done (and its timings
        // resolved) before the bytes are meaningful.
        self.state.synchronize()?;
        // SAFETY: in bounds (checked); `out` outlives the copy because the
        // stream is synchronized before returning.
        unsafe {
            result::memcpy_dtoh_async(
                out,
                self.pointer + byte_offset as u64,
                self.state.stream().cu_stream(),
            )
        }
        .map_err(driver_error("copying device to host"))?;
        self.state.stream().synchronize()?;
        Ok(())
    }

    fn read_settled(&self, byte_offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(byte_offset, out.len())?;
        if let Some(host) = self.host {
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            // SAFETY: in bounds (checked) of the mapped allocation, which
            // lives as long as `self`; the kernels that wrote these bytes
            // have finished (the caller's contract), so no write races the
            // copy.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (host as *const u8).add(byte_offset),
                    out.as_mut_ptr(),
                    out.len(),
                )
            };
            return Ok(());
        }
        self.state.bind()?;
        // SAFETY: in bounds (checked); a synchronous copy on the legacy
        // stream, which does not wait for our non-blocking stream, so it
        // runs beside later work; `out` outlives it.
        unsafe {
            sys::cuMemcpyDtoH_v2(
                out.as_mut_ptr() as *mut std::ffi::c_void,
                self.pointer + byte_offset as u64,
                out.len(),
            )
        }
        .result()
        .map_err(driver_error("copying settled bytes from device to host"))
    }

    fn read_later(&self, byte_offset: usize, bytes: usize) -> Result<Box<dyn PendingBytes>> {
        Ok(Box::new(self.start_read(byte_offset, bytes)?))
    }

    fn write_bytes(&self, byte_offset: usize, data: &[u8]) -> Result<()> {
        self.check(byte_offset, data.len())?;
        self.state.bind()?;
        // SAFETY: in bounds (checked). The source is pageable host memory,
        // which the driver stages before returning, so it may be freed after.
        unsafe {
            result::memcpy_htod_async(
                self.pointer + byte_offset as u64,
                data,
                self.state.stream().cu_stream(),
            )
        }
        .map_err(driver_error("copying host to device"))?;
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A device-to-host copy into pinned staging memory, and the event after it.
pub(crate) struct CudaPendingRead {
    state: Arc<DeviceState>,
    staging: Option<Staging>,
    done: Option<Event>,
    bytes: usize,
}

impl PendingBytes for CudaPendingRead {
    /// Waits for the copy, then resolves the submissions finished by now.
    fn wait(mut self: Box<Self>, out: &mut [u8]) -> Result<()> {
        self.finish()?;
        let staging = self.staging.as_ref().expect("present until dropped");
        assert_eq!(
            out.len(),
            self.bytes,
            "a pending read fills exactly what it copied"
        );
        // SAFETY: the copy of `self.bytes` bytes into the staging block has
        // completed (`finish`), and the block holds at least that many.
        unsafe { staging.copy_out(out) };
        self.state.resolve_completed()?;
        Ok(())
    }
}

impl CudaPendingRead {
    fn finish(&mut self) -> Result<()> {
        if let Some(done) = &self.done {
            self.state.bind()?;
            done.synchronize().map_err(driver_error("waiting for a read"))?;
        }
        Ok(())
    }
}

impl Drop for CudaPendingRead {
    fn drop(&mut self) {
        // The staging block may go back to the pool only once the copy into
        // it is done; a read dropped unread waits here.
        if self.finish().is_err() {
            // The context is broken: leak the block rather than reuse it.
            std::mem::forget(self.staging.take());
            return;
        }
        if let Some(staging) = self.staging.take() {
            self.state.stream().give_back_staging(staging);
        }
        if let Some(done) = self.done.take() {
            self.state.stream().give_back_events([done]);
        }
    }
}
