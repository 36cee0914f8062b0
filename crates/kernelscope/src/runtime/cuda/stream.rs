//! The device's context and its one non-default stream (stream capture is
//! refused on the legacy default stream), with the events and pinned
//! staging blocks pooled on it: a profiled decode loop records events around
//! every submission and reads a token back every step, and creating either
//! afresh each time would add to what is being measured.

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaStream, sys};

use super::driver::{Event, Staging, driver_error};
use crate::error::Result;

/// A context, its stream and the pools. Fields drop in order: the pooled
/// handles go before the stream and the context (which cudarc's handles
/// also keep alive).
pub(crate) struct DeviceStream {
    spare_events: Mutex<Vec<Event>>,
    staging: Mutex<Vec<Staging>>,
    stream: Arc<CudaStream>,
    context: Arc<CudaContext>,
}

impl DeviceStream {
    pub(crate) fn new(context: Arc<CudaContext>, stream: Arc<CudaStream>) -> DeviceStream {
        DeviceStream {
            spare_events: Mutex::new(Vec::new()),
            staging: Mutex::new(Vec::new()),
            stream,
            context,
        }
    }

    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }

    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub(crate) fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    /// Makes the context current on this thread (every entry point does it
    /// once, so the calls below it need not).
    pub(crate) fn bind(&self) -> Result<()> {
        self.context
            .bind_to_thread()
            .map_err(driver_error("binding the context"))
    }

    /// Waits for everything queued on the stream.
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(driver_error("synchronizing the stream"))
    }

    /// An event with timing enabled, recorded on the stream.
    pub(crate) fn record_event(&self) -> Result<Event> {
        let event = match crate::sync::lock(&self.spare_events).pop() {
            Some(event) => event,
            None => Event::new(&self.context)?,
        };
        event.record(&self.stream)?;
        Ok(event)
    }

    /// Returns events whose times have been read to the pool.
    pub(crate) fn give_back_events(&self, events: impl IntoIterator<Item = Event>) {
        crate::sync::lock(&self.spare_events).extend(events);
    }

    /// Pinned host memory of at least `bytes`, from the pool when it has some.
    pub(crate) fn take_staging(&self, bytes: usize) -> Result<Staging> {
        let mut pool = crate::sync::lock(&self.staging);
        if let Some(position) = pool.iter().position(|block| block.len() >= bytes) {
            return Ok(pool.swap_remove(position));
        }
        drop(pool);
        Staging::new(&self.context, bytes.max(1).next_multiple_of(4096))
    }

    /// Returns a block no copy is writing into any more to the pool.
    pub(crate) fn give_back_staging(&self, staging: Staging) {
        crate::sync::lock(&self.staging).push(staging);
    }
}
