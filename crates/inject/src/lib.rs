//! The library `kscope profile` loads into the program it profiles. The
//! CUDA driver, given `CUDA_INJECTION64_PATH`, loads it inside `cuInit` and
//! calls [`InitializeInjection`]: it subscribes to CUPTI's activity records
//! (kernels, copies, sets) and of the API calls a profile needs. The NVTX
//! library, given `NVTX_INJECTION64_PATH`, loads it on the program's first
//! NVTX call and calls [`InitializeInjectionNvtx2`], whose ranges become the
//! profile's scopes and steps. With `--graphs events` the library is
//! preloaded too, and its [`cudaGraphLaunch`] stands in for the runtime's.
//! Whichever comes first opens `$KSCOPE_TRACE_DIR/<pid>.kst`, where
//! everything goes as kernelscope-trace frames. A thread writes every
//! [`FLUSH_PERIOD`], so a process that dies leaves all but its last
//! period's records; at exit, or on a fatal signal, the rest are written
//! and the end frame. What `kscope profile` asks for comes in `KSCOPE_*`
//! variables (`kernelscope_trace::injection_settings`), read once.
//!
//! Nothing here may panic across the C boundary: every entry point catches
//! unwinding, and a failure is a line on stderr naming kscope, after which
//! the program runs on unprofiled.
//!
//! # Layers
//!
//! This file holds only the module list and the entry points the driver,
//! NVTX and the program call. The modules below it form layers: a module
//! uses only modules of lower layers (or of its own, one way), so no file
//! imports a file that imports it back (kernelscope's
//! `tests/import_loops.rs` checks it). From the top:
//!
//! 1. `startup`: the first entry point opens the record file, starts the
//!    flusher, installs the exit handlers, attaches CUPTI.
//! 2. `exit`: the end of the file at exit or on a fatal signal.
//! 3. `collection` (when CUPTI is attached and collecting) and `nvtx` (the
//!    program's ranges, which move a window of steps; uses `collection`).
//! 4. `callbacks` (CUPTI's callback and subscribing to it) and
//!    `graph_events/` (graph launches timed by events; its own files
//!    layered `runtime` < `anchors` < `state` < `resolve` < `mod.rs`).
//! 5. `devices` (naming devices, starting their DRAM samplers).
//! 6. `sampler_gate` (the program's calls wait for a sampler starting).
//! 7. `records` (CUPTI's buffers), `pm` (DRAM sampling), `subscriber` (the
//!    subscription's state), `window` (the window of steps).
//! 8. `sink`: the record file and its queue.
//! 9. Foundations, which use no module of the library: `settings` (the
//!    environment, read once), `locking`, `clock`, `threads`, `api_calls`.
//!
//! # Process-wide state
//!
//! The library's state lives in `static`s: CUDA, CUPTI, NVTX, the signal
//! and exit handlers and the program's own calls into the stand-ins reach
//! it with no pointer of ours, on any thread, so it cannot be handed down
//! from an entry point. Each module keeps at most one or two, a struct
//! grouping what it owns (`sink`'s file and queue, `pm`'s samplers,
//! `subscriber`'s subscription…), every field an atomic, a lock or a
//! `OnceLock`, and no other module touches it but through the module's
//! functions. Per-thread facts (a thread's id, its open NVTX ranges) are
//! thread-locals.

mod api_calls;
mod callbacks;
mod clock;
mod collection;
mod devices;
mod exit;
mod graph_events;
mod locking;
mod nvtx;
mod pm;
mod records;
mod sampler_gate;
mod settings;
mod sink;
mod startup;
mod subscriber;
mod threads;
mod window;

use std::ffi::{c_int, c_void};

use graph_events::GraphLaunch;

pub use sink::FLUSH_PERIOD;

/// Called by the CUDA driver once it has loaded the library: 1 when
/// recording started, 0 when it could not (said on stderr).
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjection() -> c_int {
    c_int::from(startup::cuda_started())
}

/// Called by NVTX on loading us: 1 when our handlers are in its tables, 0
/// (every call a no-op) if not.
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjectionNvtx2(
    get_export_table: Option<unsafe extern "C" fn(export_table_id: u32) -> *const c_void>,
) -> c_int {
    startup::nvtx_loaded(get_export_table)
}

/// The CUDA runtime's `cudaGraphLaunch`, timed (`--graphs events`).
///
/// # Safety
/// As the CUDA runtime's: `exec` an instantiated graph, `stream` a stream or 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGraphLaunch(exec: *mut c_void, stream: *mut c_void) -> c_int {
    // SAFETY: as the caller promises.
    unsafe { graph_events::launch(GraphLaunch::Default, exec, stream, startup::ensure_open) }
}

/// The CUDA runtime's `cudaGraphLaunch_ptsz` (a program built with the
/// per-thread default stream), timed.
///
/// # Safety
/// As [`cudaGraphLaunch`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGraphLaunch_ptsz(exec: *mut c_void, stream: *mut c_void) -> c_int {
    // SAFETY: as the caller promises.
    unsafe { graph_events::launch(GraphLaunch::PerThread, exec, stream, startup::ensure_open) }
}

/// The CUDA runtime's `cudaDeviceReset`: the current device's timed
/// launches are read first, and its events and stream forgotten (the reset
/// frees them).
///
/// # Safety
/// As the CUDA runtime's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaDeviceReset() -> c_int {
    // SAFETY: as the caller promises.
    unsafe { graph_events::device_reset() }
}
