//! The bottom layer of the CUDA backend: driver errors turned into ours, and
//! the two driver objects we pool, events and pinned staging memory. Both
//! are owned by cudarc's safe types (`CudaEvent`, `PinnedHostSlice`), which
//! destroy them on drop and keep their context alive; the calls made on
//! every launch or read go straight to the driver, because cudarc's methods
//! bind the context and synchronise the object's own event on each call,
//! which the device has already done once per submission.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError, PinnedHostSlice, result, sys};

use crate::error::{Error, Result};

/// Turns a driver error into ours, naming the operation.
pub(crate) fn driver_error(operation: &str) -> impl FnOnce(DriverError) -> Error + '_ {
    move |source| Error::Cuda {
        operation: operation.to_string(),
        source,
    }
}

/// Like [`driver_error`] for a device allocation of `requested_bytes`: running
/// out of device memory is its own error, which callers can act on.
pub(crate) fn allocation_error(
    operation: &str,
    requested_bytes: usize,
) -> impl FnOnce(DriverError) -> Error + '_ {
    move |source| match source.0 {
        sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => Error::DeviceOutOfMemory {
            operation: operation.to_string(),
            requested_bytes,
        },
        _ => Error::Cuda {
            operation: operation.to_string(),
            source,
        },
    }
}

/// Whether a CUDA driver library can be loaded.
pub(crate) fn driver_present() -> bool {
    // SAFETY: only tries to load the driver library by its known names.
    unsafe { sys::is_culib_present() }
}

/// The driver's API version, as `kscope info` and profiles show it.
pub(crate) fn driver_version() -> String {
    let mut version = 0;
    // SAFETY: writes one int.
    unsafe { sys::cuDriverGetVersion(&mut version) };
    format!("CUDA driver API {}.{}", version / 1000, (version % 1000) / 10)
}

/// A CUDA event with timing enabled. Pooled by the device's stream.
pub(crate) struct Event(CudaEvent);

impl Event {
    /// A fresh event of `context` (bound by the caller).
    pub(crate) fn new(context: &Arc<CudaContext>) -> Result<Event> {
        context
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map(Event)
            .map_err(driver_error("creating an event"))
    }

    /// Records the event on `stream`, a stream of its context, with the
    /// context bound (cudarc's `record` would bind it again at every launch).
    pub(crate) fn record(&self, stream: &CudaStream) -> Result<()> {
        // SAFETY: a live event and a live stream of the same context.
        unsafe { result::event::record(self.0.cu_event(), stream.cu_stream()) }
            .map_err(driver_error("recording an event"))
    }

    /// Milliseconds from this event to `end`, both recorded on one context.
    /// Not waiting for either (cudarc's `elapsed_ms` synchronises both): the
    /// callers only ask once they have completed, and the driver answers
    /// `CUDA_ERROR_NOT_READY` otherwise.
    pub(crate) fn elapsed_ms(&self, end: &Event) -> std::result::Result<f32, DriverError> {
        // SAFETY: two live events of one context.
        unsafe { result::event::elapsed(self.0.cu_event(), end.0.cu_event()) }
    }

    /// Whether the work recorded before the event has completed.
    pub(crate) fn is_complete(&self) -> bool {
        self.0.is_complete()
    }

    /// Waits for the work recorded before the event.
    pub(crate) fn synchronize(&self) -> std::result::Result<(), DriverError> {
        self.0.synchronize()
    }
}

/// Pinned host memory that device-to-host reads land in, pooled by the
/// device's stream (pinning is slow; a decode loop reads a token back every
/// step). Not write-combined (cudarc's default): the host reads it.
pub(crate) struct Staging {
    /// Owns the memory (freed on drop).
    block: PinnedHostSlice<u8>,
    /// The block's address, taken once: cudarc's accessors synchronise the
    /// block's own event on every call, which this use never records.
    pointer: *mut u8,
}

// SAFETY: `pointer` points into `block`, which this value owns; whoever holds
// it has it alone (the pool hands each block to one read at a time).
unsafe impl Send for Staging {}

impl Staging {
    /// A block of `bytes` (at least one) in `context` (bound by the caller).
    pub(crate) fn new(context: &Arc<CudaContext>, bytes: usize) -> Result<Staging> {
        // SAFETY: the bytes start uninitialised; the host reads only those a
        // completed device copy wrote (see `copy_out`). Flags 0: plain pinned
        // memory, as before (write-combined memory is slow for host reads).
        let mut block = unsafe { context.alloc_pinned_with_flags::<u8>(bytes, 0) }
            .map_err(driver_error("allocating pinned staging memory"))?;
        let pointer = block
            .as_mut_ptr()
            .map_err(driver_error("allocating pinned staging memory"))?;
        Ok(Staging { block, pointer })
    }

    /// Its size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.block.len()
    }

    /// Where a device-to-host copy may write (at most `len()` bytes).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.pointer
    }

    /// Copies the block's first `out.len()` bytes into `out`.
    ///
    /// # Safety
    /// A device copy that wrote those bytes has completed, and
    /// `out.len() <= self.len()`.
    pub(crate) unsafe fn copy_out(&self, out: &mut [u8]) {
        debug_assert!(out.len() <= self.len());
        // SAFETY: per the contract, the bytes are in the block and written.
        unsafe { std::ptr::copy_nonoverlapping(self.pointer, out.as_mut_ptr(), out.len()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // No driver call: a `DriverError` is only a code until it is shown.
    #[test]
    fn out_of_memory_is_told_from_other_driver_errors() {
        let oom = allocation_error("allocating device memory", 1 << 40)(DriverError(
            sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
        ));
        assert!(
            matches!(oom, Error::DeviceOutOfMemory { requested_bytes, .. } if requested_bytes == 1 << 40)
        );
        assert!(oom.is_out_of_memory());
        assert_eq!(
            oom.to_string(),
            "CUDA allocating device memory: out of device memory (1099511627776 bytes asked for)"
        );
        let invalid = allocation_error("allocating device memory", 4)(DriverError(
            sys::CUresult::CUDA_ERROR_INVALID_VALUE,
        ));
        assert!(!invalid.is_out_of_memory());
        assert!(
            matches!(&invalid, Error::Cuda { source, .. } if source.0 == sys::CUresult::CUDA_ERROR_INVALID_VALUE)
        );
        assert!(std::error::Error::source(&invalid).is_some());
        // Out of memory from any other call is still told apart.
        let graph =
            driver_error("instantiating a graph")(DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY));
        assert!(graph.is_out_of_memory());
    }
}
