//! When CUPTI is attached and collecting. A whole run attaches once CUDA
//! starts and collects to the end. With a window of steps (`window`),
//! attaching waits for the window to open and CUPTI is detached
//! (`cuptiFinalize`) when it closes: a process with CUPTI attached pays on
//! every launch even while no record is collected (eager PyTorch ran as
//! slowly under a window of 16 steps as under a whole profile, on the
//! H100), so only the window's steps may pay.
//!
//! With `--graphs whole` (`KSCOPE_GRAPHS`) CUPTI's graph trace is switched on
//! beside the kernel records: one record per graph launch and none for the
//! nodes in it, written as a kernel named `whole CUDA graph N`
//! (`kernelscope_trace::whole_graph_name`), which the profile makes a
//! dispatch of kind `WholeGraph`. Timing every node costs a program that
//! replays graphs far more than one record per launch (docs/PERF.md).
//!
//! To find what the recording itself costs, `KSCOPE_INJECT_OMIT` (a comma
//! list of `clock`, `copies`, `flusher`, `kernels`, `subscriber`, `cupti`)
//! leaves parts out and `KSCOPE_CUPTI_DEVICE_BUFFER_MB` sizes CUPTI's device
//! buffer; `tools/gpu/graph_overhead_parts.sh` runs each against the bare
//! program. Diagnostics, not for profiles anyone reads
//! (`kernelscope_trace::injection_settings::Diagnostics`).
//!
//! Uses `callbacks` and `subscriber` (subscribing, detaching), `records`
//! (CUPTI's buffers), `devices`, `window`, `clock` and `settings`; used by
//! `nvtx` (the window's ranges), `exit` and `startup`.

use std::sync::{Mutex, MutexGuard};

use cudarc::cupti::{result as cupti, sys};
use kernelscope_trace::injection_settings::GraphTracing;

use crate::settings::settings;

/// Where the process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Collection {
    /// CUDA has not started (no `InitializeInjection` yet).
    CudaNotStarted,
    /// CUDA started; CUPTI waits for the window to open.
    Waiting,
    /// CUPTI attached and collecting (the window's close detaches it).
    Attached,
    /// CUPTI detached for good, its records written.
    Detached,
}

/// Where the process is, process-wide: the window's ranges move it on any
/// thread, and the flusher and the exit handlers read it.
static COLLECTION: Mutex<Collection> = Mutex::new(Collection::CudaNotStarted);

fn lock() -> MutexGuard<'static, Collection> {
    crate::locking::lock(&COLLECTION)
}

/// The kinds of activity records collected.
const KINDS: [sys::CUpti_ActivityKind; 3] = [
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET,
];

/// The kinds of records collected: [`KINDS`] (less what an overhead
/// experiment leaves out), and graph launches' times when graphs are traced
/// whole (CUPTI then leaves out their nodes).
fn kinds() -> impl Iterator<Item = sys::CUpti_ActivityKind> {
    let whole = (settings().graph_tracing() == GraphTracing::Whole)
        .then_some(sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
    let omitted = settings().omitted();
    whole.into_iter().chain(KINDS.into_iter().filter(move |&kind| {
        if kind == sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL {
            !omitted.kernels
        } else {
            !omitted.copies
        }
    }))
}

/// Sets CUPTI's device buffer to the MiB an overhead experiment asked
/// for, if it did; one it asked for wrongly is why CUPTI is not attached.
fn size_device_buffer() -> Result<(), String> {
    if let Some(problem) = &settings().cupti_refused {
        return Err(problem.clone());
    }
    let Some(megabytes) = settings().injection.diagnostics.cupti_device_buffer_mib else {
        return Ok(());
    };
    let megabytes = megabytes.get();
    let mut bytes: usize = megabytes << 20;
    let mut size = std::mem::size_of::<usize>();
    // SAFETY: the attribute takes a size_t, passed by pointer with its size.
    let set = unsafe {
        sys::cuptiActivitySetAttribute(
            sys::CUpti_ActivityAttribute::CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE,
            &mut size,
            (&mut bytes as *mut usize).cast(),
        )
    };
    if set != sys::CUptiResult::CUPTI_SUCCESS {
        return Err(format!(
            "CUPTI refused a device buffer of {megabytes} MiB ({set:?})"
        ));
    }
    Ok(())
}

/// CUDA has started (inside `cuInit`) and CUPTI attaches
/// ([`crate::settings::Settings::attaches_cupti`]): attach and
/// collect now, unless a window has not opened yet.
pub(crate) fn cuda_started() -> Result<(), String> {
    let mut collection = lock();
    *collection = Collection::Waiting;
    if crate::window::collecting() {
        // Inside cuInit: no driver call, and no context to describe yet
        // (its creation's callback will come).
        attach(false)?;
        *collection = Collection::Attached;
        switch_records(true)?;
    }
    Ok(())
}

/// The window of steps opened or closed: brings CUPTI to what the window
/// is now (not to what the caller saw: another thread may have moved it
/// since), attaching and collecting, or collecting no more.
pub(crate) fn follow_window() {
    let mut collection = lock();
    if let Err(problem) = reconcile(&mut collection) {
        eprintln!("kscope profile: {problem}");
    }
}

fn reconcile(collection: &mut Collection) -> Result<(), String> {
    let window_open = crate::window::collecting();
    match *collection {
        Collection::Waiting if window_open => {
            attach(true)?;
            *collection = Collection::Attached;
            switch_records(true)
        }
        Collection::Attached if !window_open => {
            // The device may still be running the window's last work, whose
            // records come only once it ends.
            synchronize_current_context();
            let switched = switch_records(false);
            *collection = Collection::Detached;
            crate::subscriber::detach_at_next_call();
            switched
        }
        // Before CUDA starts (for good, where CUPTI never attaches)
        // `cuda_started` acts on the window; after it closed nothing more
        // is collected.
        _ => Ok(()),
    }
}

/// Waits for the calling thread's context's work, if it has a context.
fn synchronize_current_context() {
    let mut context: cudarc::driver::sys::CUcontext = std::ptr::null_mut();
    // SAFETY: one out-parameter, then a synchronisation of that context on
    // this thread, where it is current; the driver is initialised (CUDA started).
    unsafe {
        if cudarc::driver::sys::cuCtxGetCurrent(&mut context) == cudarc::driver::sys::CUresult::CUDA_SUCCESS
            && !context.is_null()
        {
            cudarc::driver::sys::cuCtxSynchronize();
        }
    }
}

/// Puts CUPTI on our clock and subscribes to its records and callbacks;
/// `late`: for a window, after the program made its context (not inside
/// `cuInit`, where the driver may not be called).
fn attach(late: bool) -> Result<(), String> {
    if !settings().omitted().clock {
        // SAFETY: registers a plain `extern "C" fn() -> u64`, before any record is enabled.
        let clock =
            unsafe { sys::cuptiActivityRegisterTimestampCallback(Some(crate::clock::cupti_timestamp)) };
        if clock != sys::CUptiResult::CUPTI_SUCCESS {
            return Err(format!("CUPTI refused kscope's clock ({clock:?})"));
        }
    }
    size_device_buffer()?;
    cupti::activity::register_callbacks(
        Some(crate::records::buffer_requested),
        Some(crate::records::buffer_completed),
    )
    .map_err(|error| format!("CUPTI refused its callbacks: {error}"))?;
    crate::callbacks::subscribe(settings().injection.api_calls, !settings().omitted().subscriber)?;
    if late {
        // The callback of the context's creation came before we were attached.
        crate::devices::describe_current_device();
    }
    Ok(())
}

/// Switches the kernel, copy and set records and the API calls' records.
fn switch_records(on: bool) -> Result<(), String> {
    for kind in kinds() {
        let switched = if on {
            cupti::activity::enable(kind)
        } else {
            cupti::activity::disable(kind)
        };
        switched.map_err(|error| {
            format!("CUPTI refused to switch {kind:?} (another profiler attached?): {error}")
        })?;
    }
    crate::callbacks::record_calls_as_activity(on)
}

/// Asks CUPTI for its finished buffers (`forced`: every record, even of
/// buffers not yet full), when attached. Only tries the lock: a signal
/// handler calls this, and a thread switching the window holds it briefly.
pub(crate) fn flush(forced: bool) {
    let Some(collection) = crate::locking::try_lock(&COLLECTION) else {
        return;
    };
    // Detached: its records were flushed when it detached.
    if matches!(*collection, Collection::Attached) {
        // Without force: completed buffers only, no synchronisation.
        let _ = cupti::activity::flush_all(u32::from(forced));
    }
}
