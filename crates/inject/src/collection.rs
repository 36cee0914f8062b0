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
//! program. Diagnostics, not for profiles anyone reads.

use std::sync::{Mutex, MutexGuard, OnceLock, TryLockError};

use cudarc::cupti::{result as cupti, sys};

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

static COLLECTION: Mutex<Collection> = Mutex::new(Collection::CudaNotStarted);

fn lock() -> MutexGuard<'static, Collection> {
    crate::lock(&COLLECTION)
}

/// The kinds of activity records collected.
const KINDS: [sys::CUpti_ActivityKind; 3] = [
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET,
];

/// How CUDA graphs are recorded: `nodes` (the default) records every
/// kernel, copy and set a graph launch runs; `whole` records one time per
/// graph launch instead ([`kernelscope_trace::whole_graph_name`]); `events`
/// times each graph launch by CUDA events without attaching CUPTI, and
/// records nothing else on the device ([`crate::graph_events`]). Tracing
/// each node cost a PyTorch decode replaying one graph of 240 small kernels
/// per token about 20 % of its speed on an H100 (Nsight Systems' node
/// tracing about 16 %); tracing graphs whole costs it a few percent.
pub const GRAPHS_ENV_VAR: &str = "KSCOPE_GRAPHS";

/// How CUDA graphs are recorded ([`GRAPHS_ENV_VAR`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GraphTracing {
    Nodes,
    Whole,
    Events,
}

/// [`GRAPHS_ENV_VAR`], read once.
pub(crate) fn graph_tracing() -> GraphTracing {
    static TRACING: OnceLock<GraphTracing> = OnceLock::new();
    *TRACING.get_or_init(|| match std::env::var(GRAPHS_ENV_VAR).as_deref() {
        Ok("whole") => GraphTracing::Whole,
        Ok("events") => GraphTracing::Events,
        Err(_) | Ok("nodes") => GraphTracing::Nodes,
        Ok(other) => {
            // Not eprintln: asked from the program's graph launches, where a closed stderr must not panic.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "kscope profile: {GRAPHS_ENV_VAR}={other} is not nodes, whole or events; tracing every node"
            );
            GraphTracing::Nodes
        }
    })
}

/// Whether CUPTI is ever to be attached: not when graph launches are timed
/// by events (nor when an overhead experiment leaves it out).
pub(crate) fn attaches() -> bool {
    !omitted().cupti && graph_tracing() != GraphTracing::Events
}

/// Parts of the recording left out to measure what each costs the program
/// (a comma-separated list, read once): `clock` keeps CUPTI's own clock
/// (its records then do not line up with NVTX ranges and API calls: the
/// profile's steps and scopes are wrong), `copies` records no copies or
/// sets, `flusher` starts no thread handing records to the file every
/// [`crate::FLUSH_PERIOD`] (they are written at exit), `kernels` records no
/// kernels (graph launches are still recorded when graphs are traced whole;
/// with nodes traced, nothing is timed and only CUPTI's attachment is
/// paid for), `subscriber` makes no CUPTI subscriber (no context callback:
/// devices go undescribed and no DRAM sampler starts; API calls can only
/// be recorded as activity), `cupti` never attaches CUPTI at all (only the
/// library's loading and NVTX are paid for). Not for profiles anyone reads:
/// for finding where an overhead comes from.
pub const OMIT_ENV_VAR: &str = "KSCOPE_INJECT_OMIT";

/// CUPTI's device buffer for records, in MiB (`CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE`;
/// unset: CUPTI's default), read once: for measuring whether a larger one
/// costs a program of many short kernels less.
pub const DEVICE_BUFFER_ENV_VAR: &str = "KSCOPE_CUPTI_DEVICE_BUFFER_MB";

/// What [`OMIT_ENV_VAR`] leaves out.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Omitted {
    pub(crate) clock: bool,
    pub(crate) copies: bool,
    pub(crate) flusher: bool,
    pub(crate) kernels: bool,
    pub(crate) subscriber: bool,
    pub(crate) cupti: bool,
}

/// [`OMIT_ENV_VAR`], read once; an unknown part is said on stderr and ignored.
pub(crate) fn omitted() -> Omitted {
    static OMITTED: OnceLock<Omitted> = OnceLock::new();
    *OMITTED.get_or_init(|| {
        let mut omitted = Omitted::default();
        let text = std::env::var(OMIT_ENV_VAR).unwrap_or_default();
        for part in text.split(',').map(str::trim).filter(|part| !part.is_empty()) {
            match part {
                "clock" => omitted.clock = true,
                "copies" => omitted.copies = true,
                "flusher" => omitted.flusher = true,
                "kernels" => omitted.kernels = true,
                "subscriber" => omitted.subscriber = true,
                "cupti" => omitted.cupti = true,
                other => eprintln!(
                    "kscope profile: {OMIT_ENV_VAR} part {other:?} is not clock, copies, flusher, kernels, subscriber or cupti; ignored"
                ),
            }
        }
        omitted
    })
}

/// The kinds of records collected: [`KINDS`] (less what [`OMIT_ENV_VAR`]
/// leaves out), and graph launches' times when graphs are traced whole
/// (CUPTI then leaves out their nodes).
fn kinds() -> impl Iterator<Item = sys::CUpti_ActivityKind> {
    let whole = (graph_tracing() == GraphTracing::Whole)
        .then_some(sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
    let omitted = omitted();
    whole.into_iter().chain(KINDS.into_iter().filter(move |&kind| {
        if kind == sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL {
            !omitted.kernels
        } else {
            !omitted.copies
        }
    }))
}

/// Sets CUPTI's device buffer to [`DEVICE_BUFFER_ENV_VAR`] MiB, when set.
fn size_device_buffer() -> Result<(), String> {
    let Ok(text) = std::env::var(DEVICE_BUFFER_ENV_VAR) else {
        return Ok(());
    };
    let megabytes: usize = text
        .trim()
        .parse()
        .ok()
        .filter(|&megabytes| megabytes > 0)
        .ok_or_else(|| format!("{DEVICE_BUFFER_ENV_VAR}={text} is not a whole number of MiB above 0"))?;
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

/// CUDA has started (inside `cuInit`) and CUPTI [`attaches`]: attach and
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
            crate::callbacks::detach_at_next_call();
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
    if !omitted().clock {
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
    crate::callbacks::subscribe(
        crate::callbacks::ApiCallRecording::from_environment(),
        !omitted().subscriber,
    )?;
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

/// Hands every record CUPTI holds to the file, then detaches CUPTI. Called
/// from CUPTI's callback at the exit of an API call, where CUPTI's own
/// sample detaches (elsewhere, another thread inside CUDA can crash it).
pub(crate) fn detach() {
    let _ = cupti::activity::flush_all(1);
    // Not unsubscribed: we are inside the subscriber's callback, and
    // cuptiFinalize ends every subscription (as NVIDIA's cupti_finalize
    // sample detaches).
    crate::callbacks::forget_subscriber();
    // SAFETY: no record is enabled and the buffers are flushed; CUPTI
    // detaches from the process and calls none of our functions again.
    let finalized = unsafe { sys::cuptiFinalize() };
    if finalized != sys::CUptiResult::CUPTI_SUCCESS {
        eprintln!(
            "kscope profile: CUPTI would not detach after the window ({finalized:?}); the rest of the run pays for it"
        );
    }
}

/// Asks CUPTI for its finished buffers (`forced`: every record, even of
/// buffers not yet full), when attached. Only tries the lock: a signal
/// handler calls this, and a thread switching the window holds it briefly.
pub(crate) fn flush(forced: bool) {
    let collection = match COLLECTION.try_lock() {
        Ok(collection) => collection,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return,
    };
    // Detached: its records were flushed when it detached.
    if matches!(*collection, Collection::Attached) {
        // Without force: completed buffers only, no synchronisation.
        let _ = cupti::activity::flush_all(u32::from(forced));
    }
}
