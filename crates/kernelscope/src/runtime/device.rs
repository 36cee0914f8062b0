//! The public device: a closed enum over the backends. Every method forwards
//! through [`Device::backend_ref`], the one `match` on the variant, to the
//! [`Backend`] contract each backend implements. Options (the profiling
//! level) are fixed when the device is created; nothing reads the
//! environment afterwards.

use super::backend::{Backend, Capabilities};
use super::memory::MemoryInfo;
use super::{Buffer, CpuDevice, CudaDevice, DType, DeviceOptions, Element, Kernel};
use crate::error::{Error, Result};
use crate::profile::{Conditions, Profile, Profiler};

/// A compute device.
#[derive(Clone, Debug)]
pub enum Device {
    /// The host CPU.
    Cpu(CpuDevice),
    /// An NVIDIA GPU.
    Cuda(CudaDevice),
}

impl Device {
    /// The CPU with profiling off.
    pub fn cpu() -> Device {
        Self::cpu_with(DeviceOptions::new())
    }

    /// The CPU with `options`.
    pub fn cpu_with(options: DeviceOptions) -> Device {
        Device::Cpu(CpuDevice::new(
            options.profile,
            options.token_selection,
            options.dispatch_timing_unsupported,
            options.check_finite,
        ))
    }

    /// GPU `ordinal` with `options`; an error naming the workaround where
    /// there is no usable GPU or this build lacks CUDA.
    pub fn cuda_with(ordinal: usize, options: DeviceOptions) -> Result<Device> {
        CudaDevice::open(ordinal, &options).map(Device::Cuda)
    }

    /// How many CUDA GPUs this build can open, or why none (no CUDA support
    /// in the build, no driver, no GPU), without opening any.
    pub fn cuda_device_count() -> Result<usize> {
        CudaDevice::count()
    }

    /// Parses `auto`, `cpu`, `cuda` or `cuda:N` and opens that device. `auto`
    /// picks CUDA when a GPU can be opened, else the CPU; the returned string
    /// says which and why.
    pub fn open(spec: &str, options: DeviceOptions) -> Result<(Device, String)> {
        let spec_lower = spec.trim().to_ascii_lowercase();
        match spec_lower.as_str() {
            "auto" => match Self::cuda_with(0, options.clone()) {
                Ok(device) => Ok((device, "auto: a CUDA GPU is present".to_string())),
                // The remedy (open the CPU) is what auto does, so only the reason is told.
                Err(Error::BackendUnavailable {
                    ordinal: Some(ordinal),
                    source,
                    ..
                }) => Ok((
                    Self::cpu_with(options),
                    format!("auto: using the CPU (cuda:{ordinal}: {source})"),
                )),
                Err(error) => Ok((Self::cpu_with(options), format!("auto: using the CPU ({error})"))),
            },
            "cpu" => Ok((Self::cpu_with(options), "cpu: as asked".to_string())),
            "cuda" => Ok((Self::cuda_with(0, options)?, "cuda:0: as asked".to_string())),
            other => {
                let ordinal = other
                    .strip_prefix("cuda:")
                    .ok_or_else(|| Error::InvalidDevice {
                        spec: spec.to_string(),
                        problem: "expected auto, cpu, cuda or cuda:N".to_string(),
                    })?
                    .parse::<usize>()
                    .map_err(|_| Error::InvalidDevice {
                        spec: spec.to_string(),
                        problem: "the GPU number after `cuda:` must be a non-negative integer".to_string(),
                    })?;
                Ok((
                    Self::cuda_with(ordinal, options)?,
                    format!("cuda:{ordinal}: as asked"),
                ))
            }
        }
    }

    /// The backend behind this handle: the one place the variant is matched.
    pub(crate) fn backend_ref(&self) -> &dyn Backend {
        match self {
            Device::Cpu(cpu) => cpu,
            Device::Cuda(cuda) => cuda,
        }
    }

    /// The backend's name: `cpu` or `cuda`.
    pub fn backend(&self) -> &'static str {
        self.backend_ref().kind()
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        self.backend_ref().name()
    }

    /// The device's profiling session.
    pub fn profiler(&self) -> &Profiler {
        self.backend_ref().profiler()
    }

    /// What the device can time and how it runs work.
    pub fn capabilities(&self) -> Capabilities {
        self.backend_ref().capabilities()
    }

    /// Blocks of `kernel` of `threads` threads and `shared_bytes` of
    /// dynamic shared memory one multiprocessor runs at once, as the driver
    /// counts them (registers included): what a persistent kernel's grid,
    /// whose blocks wait for each other, may not exceed. `None` on a backend
    /// without multiprocessors (the CPU).
    pub fn resident_blocks(&self, kernel: &Kernel, threads: u32, shared_bytes: u32) -> Result<Option<u32>> {
        self.backend_ref().resident_blocks(kernel, threads, shared_bytes)
    }

    /// Whether two handles are the same device.
    pub fn same_device(&self, other: &Device) -> bool {
        self.backend_ref().identity() == other.backend_ref().identity()
    }

    /// Whether `buffer` lives on this device.
    pub fn owns(&self, buffer: &Buffer) -> bool {
        buffer.memory().owner() == self.backend_ref().identity()
    }

    /// Free and total memory in bytes, where the device can tell: the GPU's
    /// own memory, or the host's available memory for the CPU (Linux).
    pub fn memory_info(&self) -> Option<MemoryInfo> {
        self.backend_ref().memory_info()
    }

    /// The physical limits the device reports: a GPU's memory bandwidth
    /// from its memory clock and bus width, its tensor-core rate from its
    /// SM count and clock; nothing for the CPU.
    pub fn physical_limits(&self) -> super::PhysicalLimits {
        self.backend_ref().physical_limits()
    }

    /// A zero-filled buffer.
    pub fn alloc(&self, dtype: DType, shape: &[usize]) -> Result<Buffer> {
        checked_byte_len(dtype, shape)?;
        let memory = self.backend_ref().alloc(dtype, shape)?;
        Ok(Buffer::new(memory, dtype, shape.to_vec()))
    }

    /// A zero-filled buffer the device writes and the host reads in place
    /// (pinned host memory mapped for a GPU; plain memory on the CPU): for
    /// small records a kernel leaves for the host, such as a persistent
    /// kernel's stamps, read without a copy on the host's critical path.
    pub fn alloc_host_mapped(&self, dtype: DType, shape: &[usize]) -> Result<Buffer> {
        checked_byte_len(dtype, shape)?;
        let memory = self.backend_ref().alloc_host_mapped(dtype, shape)?;
        Ok(Buffer::new(memory, dtype, shape.to_vec()))
    }

    /// A buffer holding a copy of `data` (one host-device copy).
    pub fn buffer_from_slice<T: Element>(&self, data: &[T], shape: &[usize]) -> Result<Buffer> {
        let elements: usize = shape.iter().product();
        if elements != data.len() {
            return Err(Error::ShapeMismatch {
                context: "Device::buffer_from_slice".to_string(),
                expected: shape.to_vec(),
                found: vec![data.len()],
            });
        }
        let buffer = self.alloc(T::DTYPE, shape)?;
        buffer.write_from(data)?;
        Ok(buffer)
    }

    /// A buffer holding the `dtype` elements of `shape` found at
    /// `byte_offset` in a memory-mapped file. The CPU reads them in place
    /// (no copy; the buffer is read-only); a GPU copies them to its memory.
    pub fn buffer_from_mapped(
        &self,
        map: std::sync::Arc<memmap2::Mmap>,
        byte_offset: usize,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Buffer> {
        let byte_len = checked_byte_len(dtype, shape)?;
        let end = byte_offset.saturating_add(byte_len);
        if end > map.len() {
            return Err(Error::OutOfBounds {
                context: "buffer over a mapped file".into(),
                start: byte_offset,
                end,
                available: map.len(),
            });
        }
        let memory = self.backend_ref().map_file(map, byte_offset, byte_len)?;
        Ok(Buffer::new(memory, dtype, shape.to_vec()))
    }

    /// The conditions of a run on this device in `mode` (`eager`, `graph`),
    /// with no ceilings: they are measured apart from the device (see
    /// `probes::ceilings`) and added with [`Conditions::with_ceilings`].
    pub fn conditions(&self, mode: &str, model: Option<String>) -> Conditions {
        let capabilities = self.capabilities();
        Conditions {
            device: self.name().to_string(),
            backend: self.backend().to_string(),
            driver: self.backend_ref().driver_version(),
            mode: mode.to_string(),
            profiling: self.profiler().level(),
            submission_timing: capabilities.submission_timing,
            dispatch_timing: capabilities.dispatch_timing,
            model,
            // Set by whoever knows the model (the weights' format, its shape).
            weight_format: None,
            model_shape: None,
            ceilings: crate::profile::Ceilings::default(),
            // Set by whoever split the run (`Profile::with_ranks`).
            topology: None,
            early_launch: capabilities.early_launch_in_graphs,
            // Set by whoever ran the CPU kernels (the ops layer knows them).
            cpu_kernels: None,
            profiled_tokens: Some(self.profiler().token_selection()).filter(|selection| !selection.is_all()),
            bytes_measured: None,
            program: None,
            anatomy: None,
        }
    }

    /// Everything the device's profiler recorded, under `conditions`.
    pub fn profile(&self, conditions: Conditions) -> Profile {
        self.profiler().snapshot(conditions)
    }
}

/// The bytes `shape` elements of `dtype` take; an error where that does not
/// fit in memory at all.
fn checked_byte_len(dtype: DType, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(dtype.size_in_bytes(), |bytes, &length| bytes.checked_mul(length))
        .filter(|&bytes| bytes <= isize::MAX as usize)
        .ok_or_else(|| Error::AllocationTooLarge {
            dtype,
            shape: shape.to_vec(),
        })
}
