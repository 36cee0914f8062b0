//! What a CUDA device's handle, its buffers and its captured graphs share:
//! the stream with its pools, the profiler, the submission timings, the
//! module cache, the gate and the lock that keeps submissions whole. Built
//! by `device.rs`; everything above reads it through these methods.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::blas::Blas;

use super::gate::Gate;
use super::modules::ModuleCache;
use super::stream::DeviceStream;
use super::timing::{PendingSubmission, Timings};
use crate::error::Result;
use crate::profile::Profiler;

/// One device's shared state. Fields drop in order: the gate's word, the
/// pooled events and staging go before the stream and the context (the
/// last fields of `stream`).
pub(crate) struct DeviceState {
    name: String,
    profiler: Profiler,
    arch: &'static str,
    /// Whether graphs launch kernels early (programmatic dependent launch).
    early_launch: bool,
    /// Whether ops may run several steps in one persistent launch.
    persistent_kernels: bool,
    /// The GPU's multiprocessors and the most shared memory a block may
    /// take, read once at open (`None` where the driver does not say).
    multiprocessors: Option<u32>,
    shared_memory_per_block: Option<u32>,
    /// Whether each dispatch's float outputs are read back and checked
    /// (`DeviceOptions::check_finite`).
    check_finite: bool,
    driver: String,
    /// The GPU's modules, shared by every device of it in the process.
    modules: Arc<ModuleCache>,
    /// cuBLASLt, opened when a library kernel is first loaded.
    blas: OnceLock<Blas>,
    timings: Timings,
    /// Held across a submission's launches (and a graph's capture), so that
    /// threads sharing the device cannot interleave launches on the stream:
    /// event pairs, CUPTI's stream order and captures all rely on it.
    submitting: Mutex<()>,
    /// Holds the stream while a CUPTI-timed submission is enqueued.
    gate: Option<Gate>,
    /// Whether this device counts among those wanting CUPTI's kernel
    /// records (see `cupti::want_records`): always, when every token is
    /// timed; during timed tokens only, under a token selection.
    wants_records: AtomicBool,
    stream: DeviceStream,
}

/// The parts of a device's state that construction measures or opens.
pub(crate) struct DeviceParts {
    pub(super) name: String,
    pub(super) profiler: Profiler,
    pub(super) arch: &'static str,
    pub(super) early_launch: bool,
    pub(super) persistent_kernels: bool,
    pub(super) multiprocessors: Option<u32>,
    pub(super) shared_memory_per_block: Option<u32>,
    pub(super) check_finite: bool,
    pub(super) driver: String,
    pub(super) modules: Arc<ModuleCache>,
    pub(super) timings: Timings,
    pub(super) gate: Option<Gate>,
    pub(super) stream: DeviceStream,
}

impl DeviceState {
    pub(crate) fn new(parts: DeviceParts) -> DeviceState {
        let DeviceParts {
            name,
            profiler,
            arch,
            early_launch,
            persistent_kernels,
            multiprocessors,
            shared_memory_per_block,
            check_finite,
            driver,
            modules,
            timings,
            gate,
            stream,
        } = parts;
        DeviceState {
            name,
            profiler,
            arch,
            early_launch,
            persistent_kernels,
            multiprocessors,
            shared_memory_per_block,
            check_finite,
            driver,
            modules,
            blas: OnceLock::new(),
            timings,
            submitting: Mutex::new(()),
            gate,
            wants_records: AtomicBool::new(false),
            stream,
        }
    }

    /// `cuda:N <gpu> (sm_XY)`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn profiler(&self) -> &Profiler {
        &self.profiler
    }

    /// The architecture kernels are compiled for (`sm_XY`).
    pub(crate) fn arch(&self) -> &'static str {
        self.arch
    }

    /// The GPU's multiprocessors, where the driver says.
    pub(crate) fn multiprocessors(&self) -> Option<u32> {
        self.multiprocessors
    }

    /// The most shared memory a block may take (opting in), where the
    /// driver says.
    pub(crate) fn shared_memory_per_block(&self) -> Option<u32> {
        self.shared_memory_per_block
    }

    /// Whether graphs launch kernels that begin by waiting early (see
    /// `runtime::early_launch`).
    pub(crate) fn early_launch(&self) -> bool {
        self.early_launch
    }

    /// Whether ops may run several steps in one persistent launch.
    pub(crate) fn persistent_kernels(&self) -> bool {
        self.persistent_kernels
    }

    /// Whether each dispatch's float outputs are checked for NaN and
    /// +infinity after it runs.
    pub(crate) fn checks_finite(&self) -> bool {
        self.check_finite
    }

    pub(crate) fn driver(&self) -> &str {
        &self.driver
    }

    pub(crate) fn modules(&self) -> &ModuleCache {
        &self.modules
    }

    /// cuBLASLt on this device, opened on first use (context bound by the caller).
    pub(crate) fn blas(&self) -> Result<&Blas> {
        if let Some(blas) = self.blas.get() {
            return Ok(blas);
        }
        let opened = Blas::new(self.stream.context())?;
        // Another thread may have opened one meanwhile; either serves.
        Ok(self.blas.get_or_init(|| opened))
    }

    pub(crate) fn stream(&self) -> &DeviceStream {
        &self.stream
    }

    pub(crate) fn gate(&self) -> Option<&Gate> {
        self.gate.as_ref()
    }

    /// Whether dispatches are timed by CUPTI (in graph replays too).
    pub(crate) fn uses_cupti(&self) -> bool {
        self.timings.uses_cupti()
    }

    /// Makes CUPTI collect kernel records exactly while this device times
    /// dispatches (`want`), for a device whose token selection times only
    /// some tokens: switched off between them, CUPTI costs their launches
    /// nothing. Before collection stops, the stream is drained and every
    /// record taken, so the last timed kernels' records are not lost. A
    /// switch CUPTI refuses is a warning; the records' matching then drops
    /// what does not line up, with its own warning.
    pub(crate) fn want_records(&self, want: bool) -> Result<()> {
        if self.wants_records.load(Ordering::Relaxed) == want {
            return Ok(());
        }
        if !want {
            self.synchronize()?;
            self.deliver(true);
        }
        match super::cupti::want_records(want) {
            Ok(()) => self.wants_records.store(want, Ordering::Relaxed),
            Err(error) => self.profiler.warn_once(
                "cupti-switch",
                &format!(
                    "kernelscope: CUPTI would not switch kernel records {} for --profile-tokens: {error}",
                    if want { "on" } else { "off" }
                ),
            ),
        }
        Ok(())
    }

    /// Registers the device with CUPTI's collection once it is built: wanting
    /// records throughout when every token is timed, else none until a
    /// timed token begins.
    pub(crate) fn start_records(&self) -> Result<()> {
        if !self.uses_cupti() {
            return Ok(());
        }
        if self.profiler.token_selection().is_all() {
            return self.want_records(true);
        }
        if let Err(error) = super::cupti::settle() {
            self.profiler.warn_once(
                "cupti-switch",
                &format!(
                    "kernelscope: CUPTI would not switch kernel records off for --profile-tokens: {error}"
                ),
            );
        }
        Ok(())
    }

    /// The stream to oneself for one submission (or capture).
    pub(crate) fn lock_submissions(&self) -> MutexGuard<'_, ()> {
        crate::sync::lock(&self.submitting)
    }

    pub(crate) fn bind(&self) -> Result<()> {
        self.stream.bind()
    }

    /// Queues a committed submission's timings until the next host wait.
    pub(crate) fn push_pending(&self, submission: PendingSubmission) {
        self.timings.push(submission);
    }

    /// Waits for the stream, then turns every pending event pair into
    /// times; submissions whose dispatches CUPTI times wait in line for
    /// their records (see [`deliver`](Self::deliver)).
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.bind()?;
        self.stream.synchronize()?;
        let pending = self.timings.take_all();
        self.timings.resolve(&self.stream, &self.profiler, pending)
    }

    /// Resolves the submissions that have finished, oldest first, without
    /// waiting for the ones still running (a read that waited only for its
    /// own copy).
    pub(crate) fn resolve_completed(&self) -> Result<()> {
        let finished = self.timings.take_completed();
        self.timings.resolve(&self.stream, &self.profiler, finished)
    }

    /// Hands the profiler what is ready; `force` also takes CUPTI's records
    /// that have not been handed over yet.
    pub(crate) fn deliver(&self, force: bool) {
        self.timings.deliver(&self.profiler, force);
    }
}

impl Drop for DeviceState {
    fn drop(&mut self) {
        // A device that goes away stops wanting records, so that one opened
        // later with a token selection can switch collection off.
        if *self.wants_records.get_mut() {
            let _ = super::cupti::want_records(false);
        }
    }
}
