//! Starting to record, once per process, from whichever entry point comes
//! first: CUDA's (`InitializeInjection`, inside `cuInit`), NVTX's
//! (`InitializeInjectionNvtx2`, on the program's first NVTX call) or a
//! graph launch stood in for (`--graphs events`). The record file opens
//! (`sink`) with the flusher thread, which every [`FLUSH_PERIOD`] hands
//! CUPTI's finished buffers, the graph launches read since and the queued
//! records to it, and the exit and signal handlers (`exit`); then CUPTI is
//! attached (`collection`) or NVTX's tables take our handlers (`nvtx`).
//!
//! The top of the library below lib.rs: it uses `sink`, `collection`,
//! `graph_events`, `exit`, `nvtx` and `settings`, and only lib.rs's entry
//! points use it.

use std::ffi::c_int;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::cupti::sys;

use crate::settings::settings;
use crate::sink::{self, FLUSH_PERIOD};

/// What has started, process-wide: each entry point is a C call with no
/// pointer of ours, and the first of them starts what the others share.
struct Started {
    /// The record file, the flusher and the exit handlers, opened once; the
    /// same answer to every later call.
    records: OnceLock<Result<(), String>>,
    /// Whether CUPTI was set up when CUDA started.
    cuda: OnceLock<bool>,
    /// Whether an NVTX copy was told the file would not open (every copy asks).
    nvtx_refusal_said: AtomicBool,
}

static STARTED: Started = Started {
    records: OnceLock::new(),
    cuda: OnceLock::new(),
    nvtx_refusal_said: AtomicBool::new(false),
};

/// Opens the file, starts the flusher and registers the exit handlers, once
/// per process; the same answer to every later call.
pub(crate) fn ensure_open() -> Result<(), String> {
    STARTED.records.get_or_init(open).clone()
}

fn open() -> Result<(), String> {
    sink::open()?;
    if settings().omitted().flusher {
        return crate::exit::install();
    }
    std::thread::Builder::new()
        .name("kscope-flush".into())
        .spawn(|| {
            loop {
                std::thread::sleep(FLUSH_PERIOD);
                crate::collection::flush(false);
                crate::graph_events::resolve(false);
                sink::write_queued_now(false);
            }
        })
        .map_err(|error| format!("starting the flusher: {error}"))?;
    crate::exit::install()
}

/// CUDA started (the driver called `InitializeInjection`): opens the record
/// file (if NVTX has not) and attaches to CUPTI (`collection`), now or
/// when a window of steps opens. Whether recording started; once per
/// process, a failure said on stderr.
pub(crate) fn cuda_started() -> bool {
    *STARTED.cuda.get_or_init(|| match std::panic::catch_unwind(start_cuda) {
        Ok(Ok(())) => true,
        Ok(Err(problem)) => {
            eprintln!(
                "kscope profile: not recording this process's kernels ({}): {problem}",
                std::process::id()
            );
            false
        }
        Err(_) => {
            eprintln!(
                "kscope profile: not recording this process's kernels ({}): the injection library panicked",
                std::process::id()
            );
            false
        }
    })
}

fn start_cuda() -> Result<(), String> {
    ensure_open()?;
    // Graph launches timed by events (or CUPTI left out): CUPTI is never
    // touched, and the collection stays where a window cannot move it.
    if !settings().attaches_cupti() {
        return Ok(());
    }
    // SAFETY: only tries to load the library by its known names.
    if !unsafe { sys::is_culib_present() } {
        return Err("libcupti is not on the loader path".into());
    }
    crate::collection::cuda_started()
}

/// An NVTX copy loaded us: opens the record file and writes our handlers
/// into its tables. 1 when they are there, 0 (every NVTX call a no-op) if not.
pub(crate) fn nvtx_loaded(get_export_table: Option<crate::nvtx::GetExportTable>) -> c_int {
    crate::nvtx::guarded(0, || {
        if let Err(problem) = ensure_open() {
            // Every NVTX copy asks: one line, unless NVTX's unloading us on 0 forgets it.
            let pid = std::process::id();
            if !STARTED.nvtx_refusal_said.swap(true, Ordering::Relaxed) {
                eprintln!("kscope profile: not recording NVTX ranges of this process ({pid}): {problem}");
            }
            return 0;
        }
        // SAFETY: NVTX passes its own `nvtxGetExportTable`, which lives as long as the process.
        c_int::from(unsafe { crate::nvtx::attach(get_export_table) }.is_some())
    })
}
