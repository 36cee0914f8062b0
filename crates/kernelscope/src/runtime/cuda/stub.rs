//! The CUDA backend of a build without the `cuda` feature: an uninhabited
//! device that implements the backend contract like the real one (the
//! compiler checks it), so `Device::Cuda` exists in every build, code and
//! tests are written once against `&Device`, and opening a GPU is an error
//! that names the workaround.

use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;

use crate::error::{CudaUnavailable, Error, Remedy, Result};
use crate::profile::Profiler;
use crate::runtime::backend::{Backend, Capabilities, KernelSources};
use crate::runtime::command::Command;
use crate::runtime::kernel::LoadedKernel;
use crate::runtime::memory::DeviceMemory;
use crate::runtime::memory::MemoryInfo;
use crate::runtime::{DType, DeviceOptions};

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
        Err(unavailable(Some(ordinal)))
    }

    pub(crate) fn count() -> Result<usize> {
        Err(unavailable(None))
    }

    /// The GPU's ordinal: never reached, since no CUDA device exists here.
    pub fn ordinal(&self) -> usize {
        match self.never {}
    }
}

/// NCCL collectives: never reached, since no CUDA device exists here.
pub(crate) fn open_collectives(
    devices: &[&CudaDevice],
) -> Result<Arc<dyn crate::runtime::collective::group::GroupBackend>> {
    match devices.first() {
        Some(device) => match device.never {},
        None => Err(unavailable(None)),
    }
}

/// NCCL: not loaded without the CUDA backend.
pub(crate) fn nccl_library() -> Result<String> {
    Err(unavailable(None))
}

/// NCCL's unique id: never reached, since no CUDA device exists here.
pub(crate) fn nccl_unique_id() -> Result<Vec<u8>> {
    Err(unavailable(None))
}

/// NCCL between processes: never reached, since no CUDA device exists here.
pub(crate) fn join_collectives(
    device: &CudaDevice,
    _id: &[u8],
    _rank: usize,
    _ranks: usize,
) -> Result<Arc<dyn crate::runtime::collective::group::GroupBackend>> {
    match device.never {}
}

fn unavailable(ordinal: Option<usize>) -> Error {
    Error::BackendUnavailable {
        backend: "cuda",
        ordinal,
        source: CudaUnavailable::NotBuilt,
        remedies: &[Remedy::RebuildWithCuda, Remedy::OtherDevice { device: "cpu" }],
    }
}

impl Backend for CudaDevice {
    fn kind(&self) -> &'static str {
        match self.never {}
    }
    fn name(&self) -> &str {
        match self.never {}
    }
    fn identity(&self) -> usize {
        match self.never {}
    }
    fn profiler(&self) -> &Profiler {
        match self.never {}
    }
    fn capabilities(&self) -> Capabilities {
        match self.never {}
    }
    fn driver_version(&self) -> Option<String> {
        match self.never {}
    }
    fn memory_info(&self) -> Option<MemoryInfo> {
        match self.never {}
    }
    fn alloc(&self, _dtype: DType, _shape: &[usize]) -> Result<Arc<dyn DeviceMemory>> {
        match self.never {}
    }
    fn map_file(
        &self,
        _map: Arc<memmap2::Mmap>,
        _byte_offset: usize,
        _byte_len: usize,
    ) -> Result<Arc<dyn DeviceMemory>> {
        match self.never {}
    }
    fn load_kernel(&self, _name: &str, _sources: &KernelSources) -> Result<LoadedKernel> {
        match self.never {}
    }
    fn execute(&self, _commands: &[Command], _label: &Arc<str>) -> Result<()> {
        match self.never {}
    }
    fn wait(&self) -> Result<()> {
        match self.never {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counting_and_opening_say_the_build_lacks_cuda() {
        let error = CudaDevice::count().unwrap_err();
        assert_eq!(
            error.to_string(),
            "cuda backend unavailable: this build has no CUDA support; build with the `cuda` feature, or open device `cpu` instead"
        );
        assert_eq!(
            error.remedies(),
            [Remedy::RebuildWithCuda, Remedy::OtherDevice { device: "cpu" }]
        );
        assert!(matches!(
            std::error::Error::source(&error).and_then(|source| source.downcast_ref::<CudaUnavailable>()),
            Some(CudaUnavailable::NotBuilt)
        ));
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
