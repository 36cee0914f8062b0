//! Probes: what a device can do, measured with kernels of their own or with
//! the ops themselves, for the roofline and the timing checks. The read and
//! write probes stream memory (`stream_read`, `stream_write`), the copy and
//! compute probes time the Copy and MatMul ops (`copy_bandwidth`,
//! `compute`), `ceilings` gathers them for a device, and `spin` runs
//! kernels of known duration to check per-dispatch times (`kscope
//! calibrate`). They sit above `ops`: a probe may use an op, an op never a
//! probe.

pub mod ceilings;
pub mod compute;
pub mod copy_bandwidth;
pub mod spin;
pub mod stream_read;
pub mod stream_write;
mod timing;

pub use compute::{COMPUTE_PROBE_LABEL, MAX_COMPUTE_PROBE_SIZE, default_compute_size, measure_compute};
pub use copy_bandwidth::measure_bandwidth;

use crate::runtime::KernelRegistry;

/// The ops' kernels ([`crate::ops::registry`]) and the probes' own: the
/// read, write and spin kernels.
pub fn registry() -> KernelRegistry {
    let mut registry = crate::ops::registry();
    spin::register(&mut registry);
    stream_read::register(&mut registry);
    stream_write::register(&mut registry);
    registry
}
