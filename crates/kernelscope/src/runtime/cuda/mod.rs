//! The CUDA backend. With the `cuda` feature it is real (`device.rs`,
//! `memory.rs`, `compile.rs`, `execute.rs`); without it, `stub.rs` gives the
//! same types with no values, so `Device::Cuda` exists in every build, code
//! and tests are written once against `&Device`, and opening a GPU is an
//! error that names the workaround.

#[cfg(feature = "cuda")]
mod compile;
#[cfg(feature = "cuda")]
mod cupti;
#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod execute;
#[cfg(feature = "cuda")]
mod gate;
#[cfg(feature = "cuda")]
mod memory;
#[cfg(feature = "cuda")]
mod nvtx;
#[cfg(not(feature = "cuda"))]
mod stub;

#[cfg(feature = "cuda")]
pub use device::CudaDevice;
#[cfg(not(feature = "cuda"))]
pub use stub::CudaDevice;
