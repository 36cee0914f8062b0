//! kernelscope: a GPU compute runtime for LLM inference with kernel-level
//! profiling built in.
//!
//! The crate is layered so that dependencies point down only:
//!
//! ```text
//! ops      one folder per op: CPU reference, CUDA kernel, launch
//!  └─ runtime   Device · Buffer · KernelRegistry · CommandEncoder · Graph · MemRanges
//!      └─ profile   counters · submission table · dispatch table · JSON profile · analysis · compare
//! ```
//!
//! `profile` knows nothing of devices or models: it stores what the runtime
//! tells it and judges it. `runtime` owns one [`profile::Profiler`] session per
//! device, configured once when the device is created. The text report, the
//! HTML page and the Chrome trace are rendered from a [`profile::Profile`] by
//! the kernelscope-report crate, which sits above this one.
//!
//! # Example: register a kernel, encode two dispatches, read the tables
//!
//! ```
//! use kernelscope::{Device, DeviceOptions, KernelRegistry, Dispatch, DType, OpKind};
//! use kernelscope::profile::ProfileLevel;
//!
//! let device = Device::cpu_with(DeviceOptions::new().profile(ProfileLevel::Dispatch));
//! let mut registry = KernelRegistry::new();
//! registry.register_cpu("inc_one", |args| {
//!     let input = args.input::<f32>(0)?;
//!     let output = args.output::<f32>(1)?;
//!     for (o, i) in output.iter_mut().zip(input) {
//!         *o = i + 1.0;
//!     }
//!     Ok(())
//! });
//! // What it reads, for the records and the report's time by format.
//! registry.register_format("inc_one", "f32");
//! let kernel = registry.kernel(&device, "inc_one")?;
//! let input = device.buffer_from_slice(&[1.0f32, 2.0, 3.0], &[3])?;
//! let output = device.alloc(DType::F32, &[3])?;
//!
//! let mut encoder = device.command_encoder();
//! encoder.dispatch(Dispatch::new(&kernel).read(&input).write(&output).cost(12, 12, 3))?;
//! encoder.commit_and_wait_labeled("example")?;
//!
//! assert_eq!(output.to_vec::<f32>()?, vec![2.0, 3.0, 4.0]);
//! let table = device.profiler().submission_table();
//! assert_eq!(table[0].label, "example");
//! let dispatches = device.profiler().dispatches_by_label();
//! assert_eq!(dispatches[0].1[0].op_kind, OpKind::Other);
//! assert_eq!(dispatches[0].1[0].format.as_deref(), Some("f32"));
//! # Ok::<(), kernelscope::Error>(())
//! ```

#![warn(missing_docs)]

pub mod cpu_simd;
pub mod error;
pub mod hash;
pub mod host_memory;
#[cfg(test)]
mod kernel_formats_tests;
#[cfg(test)]
mod kernel_sources_tests;
pub mod ops;
pub mod probes;
pub mod profile;
pub mod quant;
pub mod rng;
pub mod runtime;
mod sync;
#[cfg(feature = "testing")]
pub mod testing;

pub use error::{Error, Remedy, Result};
pub use runtime::{
    Access, Buffer, Collective, CommandEncoder, Communicator, DType, Device, DeviceOptions, Dispatch,
    Element, Graph, Kernel, KernelArgs, KernelRegistry, MemoryInfo, OpKind, Param, PendingRead, Primitive,
};
