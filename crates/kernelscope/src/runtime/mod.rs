//! The runtime: devices, typed buffers, the kernel registry, the command
//! encoder with its dataflow barriers, and captured graphs. Every device
//! owns a [`Profiler`](crate::profile::Profiler) that the encoder feeds.

pub(crate) mod arguments;
mod backend;
mod buffer;
pub(crate) mod collective;
mod command;
mod cpu;
mod cuda;
mod device;
mod dispatch;
mod dtype;
pub(crate) mod early_launch;
mod encoder;
mod graph;
mod kernel;
pub(crate) mod library;
pub(crate) mod limits;
mod mem_ranges;
mod memory;
mod options;
mod registry;

/// Op kinds are the profiler's vocabulary; dispatches are tagged with them here.
pub use crate::profile::{OpKind, Primitive};
pub use backend::Capabilities;
pub use buffer::{Buffer, PendingRead};
pub use collective::{Collective, Communicator};
pub use cpu::CpuDevice;
pub use cpu::{CpuKernelFn, KernelArgs};
pub use cuda::CudaDevice;
pub use device::Device;
pub use dispatch::{Access, Arg, Dispatch, LaunchGrid, Param};
pub use dtype::{DType, Element};
pub use encoder::{CommandEncoder, UNLABELED};
pub use graph::Graph;
pub use kernel::Kernel;
pub use library::LibraryCall;
pub use limits::{PhysicalLimits, memory_bandwidth_gbps, tensor_flops_per_sm_per_clock};
pub use mem_ranges::{MemRange, MemRanges};
pub use memory::MemoryInfo;
pub use options::DeviceOptions;
pub use registry::KernelRegistry;
