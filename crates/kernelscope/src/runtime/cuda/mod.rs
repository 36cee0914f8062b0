//! The CUDA backend. With the `cuda` feature it is real; without it,
//! `stub.rs` gives the same types with no values, so `Device::Cuda` exists
//! in every build, code and tests are written once against `&Device`, and
//! opening a GPU is an error that names the workaround.
//!
//! The real backend is layered; each module uses only those above it:
//!
//! - `driver`: driver errors turned into ours; events and pinned staging
//!   (owned by cudarc's safe types); driver presence and version.
//! - `stream`: the context, its one stream, and the event and staging pools.
//! - `compile`, `modules`: NVRTC with the disk cache; the per-device module
//!   cache and `CudaKernel`.
//! - `blas`: cuBLASLt's handle, workspace and per-shape GEMM plans, each
//!   knowing how many kernels its call launches.
//! - `cupti`, `nvtx`, `gate`: CUPTI's process-wide records, NVTX ranges, and
//!   holding the stream until a submission is enqueued.
//! - `clock`, `matching`, `timing`: the epoch and CUPTI clocks; lining CUPTI
//!   records up with dispatches; pending submissions resolved into times.
//! - `state`: what the handle, buffers and graphs share (private fields).
//! - `memory`: device allocations and copies.
//! - `launch`, `graphs`, `execute`: one launch; graph capture and replay;
//!   a whole submission. A collective is a `RankCollective` to them
//!   (`modules`), so they do not depend on NCCL.
//! - `nccl`: collectives between GPUs (one communicator per device), opened
//!   from the devices' states.
//! - `device`: the `CudaDevice` handle, opened in named steps; it opens NCCL
//!   groups for the collective layer.

#[cfg(feature = "cuda")]
mod blas;
#[cfg(feature = "cuda")]
mod clock;
#[cfg(feature = "cuda")]
mod compile;
#[cfg(feature = "cuda")]
mod cupti;
#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod driver;
#[cfg(feature = "cuda")]
mod execute;
#[cfg(feature = "cuda")]
mod gate;
#[cfg(feature = "cuda")]
mod graphs;
#[cfg(feature = "cuda")]
mod launch;
#[cfg(feature = "cuda")]
mod matching;
#[cfg(feature = "cuda")]
mod memory;
#[cfg(feature = "cuda")]
mod modules;
#[cfg(feature = "cuda")]
mod nccl;
#[cfg(feature = "cuda")]
mod nvtx;
#[cfg(feature = "cuda")]
mod state;
#[cfg(feature = "cuda")]
mod stream;
#[cfg(not(feature = "cuda"))]
mod stub;
#[cfg(feature = "cuda")]
mod timing;

#[cfg(feature = "cuda")]
pub use device::CudaDevice;

// NVRTC as the runtime runs it, without a device: `testing::nvrtc` checks
// every registered kernel source with it.
#[cfg(all(feature = "cuda", feature = "testing"))]
pub(crate) use compile::{nvrtc_compile, nvrtc_present, nvrtc_version};
#[cfg(feature = "cuda")]
pub(crate) use device::{join_collectives, nccl_library, nccl_unique_id, open_collectives};
#[cfg(not(feature = "cuda"))]
pub use stub::CudaDevice;
#[cfg(not(feature = "cuda"))]
pub(crate) use stub::{join_collectives, nccl_library, nccl_unique_id, open_collectives};
