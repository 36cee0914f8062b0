//! Holding the stream until the host has enqueued a whole submission. With
//! CUPTI on, one graph launch spends hundreds of µs on the host (CUPTI
//! instruments every node as it launches) while the device, having already
//! passed the submission's start event, idles: the event pair would charge
//! the host's enqueue to the device, and the cross-check could not tell a
//! slow host from a lying clock. A stream wait on a host-written word,
//! placed before the start event and released once the last launch and the
//! end event are enqueued, starts the submission's clock when the device can
//! begin. The device waited for the host either way, so throughput is
//! unchanged; the host's enqueue time is recorded beside the submission.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use cudarc::driver::{CudaContext, DriverError, PinnedHostSlice, sys};

use super::driver::driver_error;
use crate::error::Result;

/// Why a gate could not be made (the device then goes without one).
#[derive(Debug, thiserror::Error)]
pub(crate) enum GateError {
    #[error("pinning the gate word: {0}")]
    Pin(#[source] DriverError),
    #[error("mapping the gate word: {0}")]
    Map(#[source] DriverError),
}

/// A word of pinned host memory the device can read, and the last ticket
/// handed out. Tickets only grow; the device waits for `word >= ticket` in
/// CUDA's wrap-safe sense (`(int32_t)(word - ticket) >= 0`).
pub(crate) struct Gate {
    /// Owns the word (cudarc frees it on drop, after every hold: holds
    /// borrow the gate). Only held, never read through.
    _word: PinnedHostSlice<u32>,
    /// The word's host address, taken once: cudarc's accessors synchronise
    /// an event on every call, and a release must cost nothing.
    host: *const AtomicU32,
    device: sys::CUdeviceptr,
    last_ticket: AtomicU32,
}

// SAFETY: `host` points into `word`, pinned memory owned by the gate and only
// touched through atomic operations; the device pointer is a plain address.
unsafe impl Send for Gate {}
// SAFETY: as above; tickets are handed out atomically.
unsafe impl Sync for Gate {}

impl Gate {
    /// A gate in `context` (bound by the caller).
    pub(crate) fn new(context: &Arc<CudaContext>) -> std::result::Result<Gate, GateError> {
        // SAFETY: a 4-byte pinned allocation mapped into the device's address
        // space; initialised below before the device or the host reads it.
        let mut word = unsafe { context.alloc_pinned_with_flags::<u32>(1, sys::CU_MEMHOSTALLOC_DEVICEMAP) }
            .map_err(GateError::Pin)?;
        let host = word.as_mut_ptr().map_err(GateError::Pin)? as *mut AtomicU32;
        // SAFETY: freshly allocated, 4-byte aligned, ours alone.
        unsafe { host.write(AtomicU32::new(0)) };
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: `host` was allocated with DEVICEMAP in this context. On
        // failure `word` is dropped, which frees it.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host as *mut _, 0) }
            .result()
            .map_err(GateError::Map)?;
        Ok(Gate {
            _word: word,
            host,
            device,
            last_ticket: AtomicU32::new(0),
        })
    }

    /// Makes `stream` wait, from here on, until the returned hold is dropped.
    pub(crate) fn hold(&self, stream: sys::CUstream) -> Result<Hold<'_>> {
        let ticket = self.last_ticket.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let hold = Hold { gate: self, ticket };
        // SAFETY: a live stream of this context and the gate's mapped word,
        // which outlives every hold (holds borrow the gate).
        unsafe {
            sys::cuStreamWaitValue32_v2(
                stream,
                self.device,
                ticket,
                sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
            )
        }
        .result()
        .map_err(driver_error(
            "holding the stream until the submission is enqueued: cuStreamWaitValue32",
        ))?;
        Ok(hold)
    }
}

/// A stream held at the gate; dropping it lets the device go on, on every
/// path (an error halfway through enqueueing must not leave the stream
/// waiting forever).
pub(crate) struct Hold<'a> {
    gate: &'a Gate,
    ticket: u32,
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        // SAFETY: the gate's pinned word, valid while the gate lives.
        unsafe { (*self.gate.host).store(self.ticket, Ordering::Release) };
    }
}
