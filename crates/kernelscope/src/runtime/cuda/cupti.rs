//! CUPTI activity records: per-dispatch GPU start and end times that do not
//! serialise the stream and that also cover kernels inside CUDA graph
//! replays. CUPTI is process-wide, so the records are collected here, keyed
//! by CUPTI's (context id, stream id), and each device takes those of its own
//! stream after a flush. Enabled only for devices created with dispatch-level
//! profiling: CUPTI adds a little to every launch.
//!
//! Under `kscope profile` (`KSCOPE_TRACE_DIR` set) CUPTI's activity
//! callbacks, one set per process, belong to the injection library: a kscope
//! run profiled that way leaves CUPTI alone and times its dispatches as
//! without CUPTI (event pairs around eager launches), saying why
//! (`CuptiUnavailable::HeldByKscopeProfile`).

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::{Mutex, OnceLock};

use cudarc::cupti::result::CuptiError;
use cudarc::cupti::{result as cupti, sys};
use cudarc::driver::sys as driver;
// Set in every process `kscope profile` runs (the protocol between kscope and
// its injection library, defined once in kernelscope-trace); read once, when
// CUPTI is first started.
use kernelscope_trace::injection_settings::TRACE_DIR_VARIABLE;

/// Why CUPTI cannot time this device's dispatches (shown in the dispatch
/// timing method, which then falls back to event pairs).
#[derive(Clone, Copy, Debug, thiserror::Error)]
pub(crate) enum CuptiUnavailable {
    #[error("libcupti is not on the loader path")]
    Missing,
    /// Under `kscope profile`, whose injection library subscribed first:
    /// CUPTI's activity callbacks are one per process, and taking them would
    /// blind the outside profile.
    #[error("kscope profile's injection library holds CUPTI in this process ({TRACE_DIR_VARIABLE} is set)")]
    HeldByKscopeProfile,
    #[error("CUPTI refused its callbacks: {0}")]
    Callbacks(#[source] CuptiError),
    #[error("CUPTI refused kernel activity (another profiler attached?): {0}")]
    KernelActivity(#[source] CuptiError),
    #[error("cuptiGetContextId: {0}")]
    ContextId(#[source] CuptiError),
    #[error("cuptiGetStreamId: {0}")]
    StreamId(#[source] CuptiError),
}

/// One kernel execution as CUPTI saw it (ns on CUPTI's clock).
#[derive(Clone, Debug)]
pub(crate) struct KernelActivity {
    pub start: u64,
    pub end: u64,
    pub name: String,
}

/// CUPTI's (context id, stream id) of a stream.
pub(crate) type StreamKey = (u32, u32);

fn collected() -> &'static Mutex<HashMap<StreamKey, Vec<KernelActivity>>> {
    static RECORDS: OnceLock<Mutex<HashMap<StreamKey, Vec<KernelActivity>>>> = OnceLock::new();
    RECORDS.get_or_init(|| Mutex::new(HashMap::new()))
}

const BUFFER_BYTES: usize = 128 << 10;

/// Buffers CUPTI gave back, reused: a forced flush at every host wait hands
/// back a partly used buffer each time, and allocating (and faulting in) a
/// fresh one inside the next launch adds to what is being measured. Measured
/// on an H200 (tiny model, graph mode): the host side of one graph launch
/// took 1056 µs with a fresh 8 MiB buffer per flush, 317 µs with a pool of
/// 1 MiB buffers, 270 µs with 128 KiB ones (2 µs without CUPTI).
fn spare_buffers() -> &'static Mutex<Vec<usize>> {
    static SPARE: OnceLock<Mutex<Vec<usize>>> = OnceLock::new();
    SPARE.get_or_init(|| Mutex::new(Vec::new()))
}

unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let reused = crate::sync::lock(spare_buffers()).pop();
    // 8-byte aligned, as CUPTI requires; returned to the pool in `buffer_completed`.
    let pointer = reused.unwrap_or_else(|| {
        let words: Box<[u64]> = vec![0u64; BUFFER_BYTES / 8].into_boxed_slice();
        Box::into_raw(words) as *mut u8 as usize
    });
    // SAFETY: CUPTI passes valid out-pointers.
    unsafe {
        *buffer = pointer as *mut u8;
        *size = BUFFER_BYTES;
        *max_records = 0;
    }
}

unsafe extern "C" fn buffer_completed(
    _context: driver::CUcontext,
    _stream: u32,
    buffer: *mut u8,
    size: usize,
    valid_size: usize,
) {
    let mut records: Vec<(StreamKey, KernelActivity)> = Vec::new();
    let mut record: *mut sys::CUpti_Activity = std::ptr::null_mut();
    // SAFETY: `buffer` is one of ours, holding `valid_size` bytes of records
    // that CUPTI wrote; each record is read per its declared kind.
    unsafe {
        while cupti::activity::get_next_record(buffer, valid_size, &mut record).is_ok() {
            if (*record).kind == sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL {
                let kernel = &*(record as *const sys::CUpti_ActivityKernel10);
                let name = if kernel.name.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(kernel.name).to_string_lossy().into_owned()
                };
                records.push((
                    (kernel.contextId, kernel.streamId),
                    KernelActivity {
                        start: kernel.start,
                        end: kernel.end,
                        name,
                    },
                ));
            }
        }
    }
    // Every buffer is BUFFER_BYTES long (ours); keep it for the next request.
    debug_assert_eq!(size, BUFFER_BYTES);
    crate::sync::lock(spare_buffers()).push(buffer as usize);
    let mut map = crate::sync::lock(collected());
    for (key, activity) in records {
        map.entry(key).or_default().push(activity);
    }
}

/// Starts kernel activity collection once per process; the error says why
/// CUPTI cannot be used (missing library, another profiler subscribed).
pub(crate) fn start() -> Result<(), CuptiUnavailable> {
    static STARTED: OnceLock<Result<(), CuptiUnavailable>> = OnceLock::new();
    *STARTED.get_or_init(|| {
        // SAFETY: only tries to load the library by its known names.
        if !unsafe { sys::is_culib_present() } {
            return Err(CuptiUnavailable::Missing);
        }
        if std::env::var_os(TRACE_DIR_VARIABLE).is_some() {
            return Err(CuptiUnavailable::HeldByKscopeProfile);
        }
        cupti::activity::register_callbacks(Some(buffer_requested), Some(buffer_completed))
            .map_err(CuptiUnavailable::Callbacks)?;
        cupti::activity::enable(sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
            .map_err(CuptiUnavailable::KernelActivity)
    })
}

/// How many devices want kernel records now, and whether CUPTI collects
/// them. [`start`] leaves collection on; a device whose token selection
/// (`--profile-tokens`) leaves the current token untimed does not want
/// records, and with no device wanting them collection is switched off,
/// so untimed tokens' launches pay nothing for CUPTI.
struct Wanting {
    devices: usize,
    collecting: bool,
}

fn wanting() -> &'static Mutex<Wanting> {
    static WANTING: OnceLock<Mutex<Wanting>> = OnceLock::new();
    WANTING.get_or_init(|| {
        Mutex::new(Wanting {
            devices: 0,
            collecting: true,
        })
    })
}

/// One device starts (`true`) or stops wanting kernel records; the caller
/// tracks its own state and calls only on a change. Collection is switched
/// when the first device starts wanting them or the last one stops. A
/// failure to switch is CUPTI's error (collection is then as it was).
pub(crate) fn want_records(want: bool) -> Result<(), CuptiError> {
    let mut wanting = crate::sync::lock(wanting());
    if want {
        wanting.devices += 1;
    } else {
        wanting.devices = wanting.devices.saturating_sub(1);
    }
    apply(&mut wanting)
}

/// Switches collection off if no device wants records (a device that opens
/// wanting none, its first token untimed).
pub(crate) fn settle() -> Result<(), CuptiError> {
    apply(&mut crate::sync::lock(wanting()))
}

fn apply(wanting: &mut Wanting) -> Result<(), CuptiError> {
    let collect = wanting.devices > 0;
    if collect != wanting.collecting {
        let kind = sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        if collect {
            cupti::activity::enable(kind)?;
        } else {
            cupti::activity::disable(kind)?;
        }
        wanting.collecting = collect;
    }
    Ok(())
}

/// CUPTI's ids of `stream` in `context`.
pub(crate) fn stream_key(
    context: driver::CUcontext,
    stream: driver::CUstream,
) -> Result<StreamKey, CuptiUnavailable> {
    let (mut context_id, mut stream_id) = (0u32, 0u32);
    // SAFETY: valid handles of a live context; two out-parameters.
    unsafe {
        sys::cuptiGetContextId(context, &mut context_id)
            .result()
            .map_err(CuptiUnavailable::ContextId)?;
        sys::cuptiGetStreamId(context, stream, &mut stream_id)
            .result()
            .map_err(CuptiUnavailable::StreamId)?;
    }
    Ok((context_id, stream_id))
}

/// CUPTI's clock, in ns.
pub(crate) fn timestamp() -> u64 {
    let mut now = 0u64;
    // SAFETY: one out-parameter.
    unsafe {
        let _ = sys::cuptiGetTimestamp(&mut now);
    }
    now
}

/// Takes the records of `key` that CUPTI has handed over, oldest first.
/// `force` also flushes buffers that are not full yet (every record of work
/// that has completed); otherwise only full buffers come.
pub(crate) fn take(key: StreamKey, force: bool) -> Vec<KernelActivity> {
    let _ = cupti::activity::flush_all(u32::from(force));
    let mut records = crate::sync::lock(collected()).remove(&key).unwrap_or_default();
    records.sort_by_key(|record| record.start);
    records
}

/// Drops every record of `key` collected so far (its stream is going away).
pub(crate) fn forget(key: StreamKey) {
    crate::sync::lock(collected()).remove(&key);
}
