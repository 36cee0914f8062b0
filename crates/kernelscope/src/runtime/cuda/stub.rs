//! The CUDA types of a build without the `cuda` feature: uninhabited, so
//! every method is statically unreachable and costs nothing.

use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;

use crate::error::{CudaUnavailable, Error, Result};
use crate::profile::{Counters, Profiler};
use crate::runtime::device::{Capabilities, DeviceOptions};
use crate::runtime::encoder::Command;
use crate::runtime::{Buffer, DType, Element};

/// A CUDA device handle. This build has no CUDA support, so none exists.
#[derive(Clone)]
pub struct CudaDevice {
    never: Infallible,
}

impl fmt::Debug for CudaDevice {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.never {}
    }
}

impl CudaDevice {
    pub(crate) fn open(ordinal: usize, _options: &DeviceOptions) -> Result<CudaDevice> {
        Err(Error::BackendUnavailable {
            backend: "cuda",
            reason: CudaUnavailable::NotBuilt { ordinal }.to_string(),
        })
    }

    /// How many GPUs could be opened, or why none.
    pub fn probe() -> std::result::Result<usize, CudaUnavailable> {
        Err(CudaUnavailable::NotBuilt { ordinal: 0 })
    }

    pub(crate) fn name(&self) -> &str {
        match self.never {}
    }
    pub(crate) fn profiler(&self) -> &Profiler {
        match self.never {}
    }
    pub(crate) fn capabilities(&self) -> Capabilities {
        match self.never {}
    }
    pub(crate) fn driver_version(&self) -> Option<String> {
        match self.never {}
    }
    pub(crate) fn same_device(&self, _other: &CudaDevice) -> bool {
        match self.never {}
    }
    pub(crate) fn owns(&self, _buffer: &Buffer) -> bool {
        match self.never {}
    }
    pub(crate) fn alloc(&self, _dtype: DType, _shape: &[usize]) -> Result<Buffer> {
        match self.never {}
    }
    pub(crate) fn memory_info(&self) -> Option<crate::runtime::device::MemoryInfo> {
        match self.never {}
    }
    pub(crate) fn upload_mapped(
        &self,
        _map: Arc<memmap2::Mmap>,
        _offset: usize,
        _dtype: DType,
        _shape: &[usize],
    ) -> Result<Buffer> {
        match self.never {}
    }
    pub(crate) fn kernel(&self, _name: &str, _source: &str) -> Result<CudaKernel> {
        match self.never {}
    }
    pub(crate) fn execute(&self, _commands: &[Command], _label: &Arc<str>) -> Result<()> {
        match self.never {}
    }
    pub(crate) fn wait(&self) -> Result<()> {
        match self.never {}
    }
}

/// A compiled CUDA kernel (none in this build).
#[derive(Clone)]
pub(crate) struct CudaKernel {
    never: Infallible,
}

/// Device memory (none in this build).
pub(crate) struct CudaMemory {
    never: Infallible,
}

impl CudaMemory {
    pub(crate) fn byte_len(&self) -> usize {
        match self.never {}
    }
    pub(crate) fn base_address(&self) -> usize {
        match self.never {}
    }
    pub(crate) fn device_name(&self) -> &str {
        match self.never {}
    }
    pub(crate) fn counters(&self) -> &Counters {
        match self.never {}
    }
    pub(crate) fn read<T: Element>(&self, _byte_offset: usize, _len: usize) -> Result<Vec<T>> {
        match self.never {}
    }
    pub(crate) fn read_later(&self, _byte_offset: usize, _bytes: usize) -> Result<CudaPendingRead> {
        match self.never {}
    }
    pub(crate) fn write<T: Element>(&self, _byte_offset: usize, _data: &[T]) -> Result<()> {
        match self.never {}
    }
    pub(crate) fn write_bytes(&self, _byte_offset: usize, _data: &[u8]) -> Result<()> {
        match self.never {}
    }
}

/// The CUDA graph made from a captured [`Graph`](crate::Graph) (nothing here).
#[derive(Debug, Default)]
pub(crate) struct CudaGraphCache;

impl fmt::Debug for CudaKernel {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.never {}
    }
}

/// Never constructed: no read can start without a CUDA buffer.
pub(crate) struct CudaPendingRead {
    never: Infallible,
}

impl CudaPendingRead {
    pub(crate) fn wait<T>(self, _len: usize) -> Result<Vec<T>> {
        match self.never {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_and_open_say_the_build_lacks_cuda() {
        let reason = CudaDevice::probe().unwrap_err();
        assert_eq!(
            reason.to_string(),
            "cuda:0: this build has no CUDA support; rebuild with `--features cuda`, or use --device cpu"
        );
        let error = CudaDevice::open(3, &DeviceOptions::new()).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("cuda:3: this build has no CUDA support"),
            "{error}"
        );
        assert!(!error.is_out_of_memory());
    }
}
