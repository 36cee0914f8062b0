//! The runtime: devices, typed buffers, the kernel registry, the command
//! encoder with its dataflow barriers, and captured graphs. Every device
//! owns a [`Profiler`](crate::profile::Profiler) that the encoder feeds.
//!
//! A device is opened by `Device::open` from `auto` (CUDA where a GPU is
//! usable, else the CPU, saying which), `cpu`, `cuda` or `cuda:N`, with
//! `DeviceOptions` fixed for its life. What a backend can do is data
//! (`Capabilities`: how it times submissions and dispatches, graph launch,
//! files mapped in place, early launch), and callers choose by capability,
//! never by backend name.
//!
//! A dispatch may declare that its bytes and flops grow with the position
//! (`Dispatch::cost_per_position`: attention over the KV cache); a graph
//! captured at one position and replayed with `CommandEncoder::replay_at`
//! records such a dispatch at the replay's position, so its GB/s stays true
//! in graph mode.
//!
//! The files are layered, and `tests/module_structure.rs` fails on any import
//! cycle a file of `runtime/` is part of: plain data first (`dtype`,
//! `mem_ranges`, `kernel`, `memory`, `buffer`, `dispatch`; `arguments`
//! (`kernel_arguments!`), then `library` and `collective/group`, which
//! declare their argument lists with it; `command`), then the backend
//! contract (`backend`, which takes the CPU kernel's signature from
//! `cpu/kernel_args`), the backends (`cpu/`, `cuda/`), the public `device`,
//! and on top `registry`, `encoder`, `graph` and `collective` (the
//! `Communicator`).

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
mod finite;
mod graph;
mod kernel;
pub(crate) mod library;
pub(crate) mod limits;
mod mem_ranges;
mod memory;
mod options;
mod registry;
mod stamps;

/// Op kinds are the profiler's vocabulary; dispatches are tagged with them here.
pub use crate::profile::{OpKind, Primitive};
pub use backend::Capabilities;
pub use buffer::{Buffer, PendingRead};
pub use collective::launcher::{LaunchedRank, Launcher};
pub use collective::rendezvous::Rendezvous;
pub use collective::{Collective, Communicator};
pub use cpu::CpuDevice;
pub use cpu::{CpuKernelFn, KernelArgs};
pub use cuda::CudaDevice;
#[cfg(all(feature = "cuda", feature = "testing"))]
pub(crate) use cuda::{nvrtc_compile, nvrtc_present, nvrtc_version};
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
pub use stamps::{STAMP_RING, StampRing};
