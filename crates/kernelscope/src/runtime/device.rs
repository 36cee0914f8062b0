//! The public device: a closed enum over the backends, each method a `match`
//! that forwards to the backend. Options (the profiling level) are fixed
//! when the device is created; nothing reads the environment afterwards.

use super::{Buffer, CommandEncoder, CpuDevice, CudaDevice, DType, Element};
use crate::error::{Error, Result};
use crate::profile::{
    Conditions, DispatchTiming, Profile, ProfileLevel, Profiler, TimingMechanism, TimingMethod,
};

/// How a device is set up. Fixed at creation.
#[derive(Clone, Debug, Default)]
pub struct DeviceOptions {
    pub(crate) profile: ProfileLevel,
    pub(crate) dispatch_timing_unsupported: Option<String>,
}

impl DeviceOptions {
    /// Profiling off, every capability the backend has.
    pub fn new() -> Self {
        Self::default()
    }

    /// Options from the environment: `KSCOPE_PROFILE=off|submission|dispatch`.
    /// Read here, once; pass the result to the device.
    pub fn from_env() -> Result<Self> {
        Ok(Self::new().profile(ProfileLevel::from_env()?))
    }

    /// Sets the profiling level.
    pub fn profile(mut self, level: ProfileLevel) -> Self {
        self.profile = level;
        self
    }

    /// The profiling level.
    pub fn profile_level(&self) -> ProfileLevel {
        self.profile
    }

    /// Makes the device behave as a backend that cannot time individual
    /// dispatches (giving `reason`), as some GPUs cannot: per-submission
    /// timing goes on and reports say "unsupported". For testing the degrade
    /// path and for measuring without per-dispatch overhead.
    pub fn without_dispatch_timing(mut self, reason: &str) -> Self {
        self.dispatch_timing_unsupported = Some(reason.to_string());
        self
    }
}

/// What a device can measure, for `kscope info` and the profile's conditions.
#[derive(Clone, Debug, PartialEq)]
pub struct Capabilities {
    /// How submissions are timed.
    pub submission_timing: TimingMethod,
    /// Whether and how dispatches are timed.
    pub dispatch_timing: DispatchTiming,
    /// Whether dispatches inside graph replays are timed too.
    pub dispatch_timing_in_graphs: bool,
    /// Whether NVTX ranges are emitted (CUDA; `None` where NVTX does not apply).
    pub nvtx: Option<bool>,
    /// Whether a replayed [`Graph`](super::Graph) is one device-side launch
    /// (CUDA graphs), which removes the host's per-dispatch cost; where it is
    /// not (the CPU), a replay runs the recorded dispatches one by one and
    /// gains nothing over encoding them again.
    pub graph_launch: bool,
    /// Whether [`Device::buffer_from_mapped`] uses a mapped file's bytes in
    /// place (the CPU) rather than copying them into the device's memory,
    /// so loading weights needs no free device memory.
    pub maps_files_in_place: bool,
}

/// A device's memory, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Free now (for the CPU: what the kernel reports as available).
    pub free: u64,
    /// In all.
    pub total: u64,
}

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
            options.dispatch_timing_unsupported,
        ))
    }

    /// GPU `ordinal` with `options`; an error naming the workaround where
    /// there is no usable GPU or this build lacks CUDA.
    pub fn cuda_with(ordinal: usize, options: DeviceOptions) -> Result<Device> {
        CudaDevice::open(ordinal, &options).map(Device::Cuda)
    }

    /// Parses `auto`, `cpu`, `cuda` or `cuda:N` and opens that device. `auto`
    /// picks CUDA when a GPU can be opened, else the CPU; the returned string
    /// says which and why.
    pub fn open(spec: &str, options: DeviceOptions) -> Result<(Device, String)> {
        let spec_lower = spec.trim().to_ascii_lowercase();
        match spec_lower.as_str() {
            "auto" => match Self::cuda_with(0, options.clone()) {
                Ok(device) => Ok((device, "auto: a CUDA GPU is present".to_string())),
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

    /// The backend's name: `cpu` or `cuda`.
    pub fn backend(&self) -> &'static str {
        match self {
            Device::Cpu(_) => "cpu",
            Device::Cuda(_) => "cuda",
        }
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        match self {
            Device::Cpu(cpu) => cpu.name(),
            Device::Cuda(cuda) => cuda.name(),
        }
    }

    /// The device's profiling session.
    pub fn profiler(&self) -> &Profiler {
        match self {
            Device::Cpu(cpu) => cpu.profiler(),
            Device::Cuda(cuda) => cuda.profiler(),
        }
    }

    /// What the device can time and how.
    pub fn capabilities(&self) -> Capabilities {
        match self {
            Device::Cpu(cpu) => Capabilities {
                submission_timing: TimingMethod::current(TimingMechanism::HostClock),
                dispatch_timing: cpu.profiler().dispatch_timing().clone(),
                dispatch_timing_in_graphs: cpu.profiler().dispatch_timing().is_supported(),
                nvtx: None,
                graph_launch: false,
                maps_files_in_place: true,
            },
            Device::Cuda(cuda) => cuda.capabilities(),
        }
    }

    /// Whether two handles are the same device.
    pub fn same_device(&self, other: &Device) -> bool {
        match (self, other) {
            (Device::Cpu(a), Device::Cpu(b)) => a.same_device(b),
            (Device::Cuda(a), Device::Cuda(b)) => a.same_device(b),
            _ => false,
        }
    }

    /// Whether `buffer` lives on this device.
    pub fn owns(&self, buffer: &Buffer) -> bool {
        match self {
            Device::Cpu(cpu) => cpu.owns(buffer),
            Device::Cuda(cuda) => cuda.owns(buffer),
        }
    }

    /// Free and total memory in bytes, where the device can tell: the GPU's
    /// own memory, or the host's available memory for the CPU (Linux).
    pub fn memory_info(&self) -> Option<MemoryInfo> {
        match self {
            Device::Cpu(_) => super::cpu::host_memory_info(),
            Device::Cuda(cuda) => cuda.memory_info(),
        }
    }

    /// A zero-filled buffer.
    pub fn alloc(&self, dtype: DType, shape: &[usize]) -> Result<Buffer> {
        let bytes = shape
            .iter()
            .try_fold(dtype.size_in_bytes(), |bytes, &length| bytes.checked_mul(length));
        if bytes.is_none_or(|bytes| bytes > isize::MAX as usize) {
            return Err(Error::AllocationTooLarge {
                dtype,
                shape: shape.to_vec(),
            });
        }
        match self {
            Device::Cpu(cpu) => cpu.alloc(dtype, shape),
            Device::Cuda(cuda) => cuda.alloc(dtype, shape),
        }
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
        match self {
            Device::Cpu(cpu) => cpu.map(map, byte_offset, dtype, shape),
            Device::Cuda(cuda) => cuda.upload_mapped(map, byte_offset, dtype, shape),
        }
    }

    /// A new command encoder on this device's queue.
    pub fn command_encoder(&self) -> CommandEncoder {
        CommandEncoder::new(self.clone())
    }

    /// The conditions of a run on this device in `mode` (`eager`, `graph`).
    pub fn conditions(
        &self,
        mode: &str,
        model: Option<String>,
        peak_bandwidth_gbps: Option<f64>,
    ) -> Conditions {
        let capabilities = self.capabilities();
        Conditions {
            device: self.name().to_string(),
            backend: self.backend().to_string(),
            driver: match self {
                Device::Cpu(_) => None,
                Device::Cuda(cuda) => cuda.driver_version(),
            },
            mode: mode.to_string(),
            profiling: self.profiler().level(),
            submission_timing: capabilities.submission_timing,
            dispatch_timing: capabilities.dispatch_timing,
            model,
            peak_bandwidth_gbps,
        }
    }

    /// Everything the device's profiler recorded, under `conditions`.
    pub fn profile(&self, conditions: Conditions) -> Profile {
        self.profiler().snapshot(conditions)
    }
}
