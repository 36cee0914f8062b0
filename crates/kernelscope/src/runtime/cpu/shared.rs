//! What a CPU device and every buffer allocated on it share: the device's
//! name, its profiler and the execution lock. Apart from the device itself
//! so that memory can hold it without depending on the backend above it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::profile::Profiler;

/// State shared by a CPU device and every buffer allocated on it.
#[derive(Debug)]
pub(crate) struct CpuShared {
    name: String,
    profiler: Profiler,
    /// Held while kernels run and while the host copies in or out, so a
    /// kernel's exclusive view of its output is never observed half-written.
    execution: Mutex<()>,
    /// Set once the device is a rank of a collective group: its collective
    /// kernels block until every rank arrives, which a thread of rayon's pool
    /// must never do (a rank waiting there could hold the thread another
    /// rank's work needs), so a grouped device runs on the caller's thread.
    grouped: AtomicBool,
    /// Whether each dispatch's float outputs are checked (`DeviceOptions::check_finite`).
    check_finite: bool,
}

impl CpuShared {
    /// The host's CPU, profiled by `profiler`.
    pub(super) fn new(profiler: Profiler, check_finite: bool) -> CpuShared {
        CpuShared {
            name: cpu_name(),
            profiler,
            execution: Mutex::new(()),
            grouped: AtomicBool::new(false),
            check_finite,
        }
    }

    /// Whether each dispatch's float outputs are checked for non-finite values.
    pub(super) fn checks_finite(&self) -> bool {
        self.check_finite
    }

    /// `cpu: <model name> (<n> threads)`.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn profiler(&self) -> &Profiler {
        &self.profiler
    }

    /// Marks the device as a rank of a collective group, for good.
    pub(super) fn mark_grouped(&self) {
        self.grouped.store(true, Ordering::Relaxed);
    }

    /// Whether the device is a rank of a collective group.
    pub(super) fn is_grouped(&self) -> bool {
        self.grouped.load(Ordering::Relaxed)
    }

    /// The device to oneself: kernels run, and host copies happen, under it.
    pub(super) fn lock_execution(&self) -> MutexGuard<'_, ()> {
        crate::sync::lock(&self.execution)
    }
}

/// `cpu: <model name> (<n> threads)`, from /proc/cpuinfo where there is one.
fn cpu_name() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split(':').nth(1))
                .map(|name| name.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("cpu: {model} ({threads} threads)")
}
