//! The CUDA runtime's own functions, as the program links them: the next
//! definitions after this library's (which stands in for `cudaGraphLaunch`),
//! or those of a runtime loaded privately by a library of the program;
//! and the runtime's handle types and answers the timing uses.
//!
//! The bottom of `graph_events`: uses only `devices` (whether the driver
//! loads) from outside it.

use std::ffi::{CStr, c_int, c_void};
use std::sync::OnceLock;

/// A `cudaEvent_t`.
pub(super) type Event = *mut c_void;
/// A `cudaStream_t`.
pub(super) type Stream = *mut c_void;
/// A `cudaGraphExec_t`.
pub(super) type GraphExec = *mut c_void;

/// `cudaSuccess` and `cudaErrorNotReady`.
pub(super) const SUCCESS: c_int = 0;
pub(super) const NOT_READY: c_int = 600;

/// The runtime's functions, each found once, process-wide: the stand-ins
/// are called by the program with no pointer of ours.
struct RuntimeFunctions {
    /// Those the timing calls, all or none ([`runtime`]).
    timing: OnceLock<Option<Runtime>>,
    /// `cudaGraphLaunch` and `cudaGraphLaunch_ptsz`, once found ([`real_launch`]).
    launch: OnceLock<Launch>,
    launch_per_thread: OnceLock<Launch>,
    /// `cudaDeviceReset`, looked for once ([`real_reset`]).
    reset: OnceLock<Option<Reset>>,
}

static FUNCTIONS: RuntimeFunctions = RuntimeFunctions {
    timing: OnceLock::new(),
    launch: OnceLock::new(),
    launch_per_thread: OnceLock::new(),
    reset: OnceLock::new(),
};

/// The CUDA runtime's functions the timing needs, from the library the
/// program itself links (`RTLD_NEXT`: the next definition after ours).
pub(super) struct Runtime {
    pub(super) event_create: unsafe extern "C" fn(*mut Event) -> c_int,
    pub(super) event_record: unsafe extern "C" fn(Event, Stream) -> c_int,
    pub(super) event_query: unsafe extern "C" fn(Event) -> c_int,
    pub(super) event_destroy: unsafe extern "C" fn(Event) -> c_int,
    pub(super) elapsed: unsafe extern "C" fn(*mut f32, Event, Event) -> c_int,
    pub(super) is_capturing: unsafe extern "C" fn(Stream, *mut c_int) -> c_int,
    pub(super) get_device: unsafe extern "C" fn(*mut c_int) -> c_int,
    pub(super) set_device: unsafe extern "C" fn(c_int) -> c_int,
    pub(super) stream_create: unsafe extern "C" fn(*mut Stream, u32) -> c_int,
    pub(super) peek_at_last_error: unsafe extern "C" fn() -> c_int,
    pub(super) get_last_error: unsafe extern "C" fn() -> c_int,
    exchange_capture_mode: unsafe extern "C" fn(*mut c_int) -> c_int,
}

/// `cudaStreamCaptureModeRelaxed`.
const RELAXED_CAPTURE: c_int = 2;

impl Runtime {
    /// Runs `calls` (ours, on the runtime) with the calling thread in the
    /// relaxed capture mode: in the default (global) mode, a call such as
    /// `cudaEventQuery` from any thread while another thread captures a
    /// graph invalidates that capture (PyTorch's NCCL watchdog hit exactly
    /// this), and a program that captures after it replayed, as
    /// `torch.compile(mode="reduce-overhead")` does for a new shape, would fail.
    pub(super) fn relaxed<T>(&self, calls: impl FnOnce() -> T) -> T {
        let mut mode = RELAXED_CAPTURE;
        // SAFETY: exchanges the calling thread's capture mode with `mode`, then back.
        let exchanged = unsafe { (self.exchange_capture_mode)(&mut mode) } == 0;
        let result = calls();
        if exchanged {
            // SAFETY: as above: restores the thread's own mode.
            unsafe { (self.exchange_capture_mode)(&mut mode) };
        }
        result
    }
}

/// The CUDA runtime's own `name`: the next definition after this
/// library's, or, where the runtime is not in the global scope (loaded
/// privately by a library of the program), the loaded runtime's.
fn next_definition(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only looks the symbol up.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if !found.is_null() {
        return Some(found);
    }
    loaded_runtimes().into_iter().find_map(|path| {
        // SAFETY: RTLD_NOLOAD only hands back a library already loaded (adding a
        // reference, kept: the runtime stays loaded); dlsym looks the name up in it.
        unsafe {
            let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
            let found = if handle.is_null() {
                std::ptr::null_mut()
            } else {
                libc::dlsym(handle, name.as_ptr())
            };
            (!found.is_null()).then_some(found)
        }
    })
}

/// The paths of the loaded CUDA runtimes (`libcudart.so*`, or a wheel's
/// `libcudart-HASH.so*`).
fn loaded_runtimes() -> Vec<std::ffi::CString> {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, found: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid entry whose name, when not null, is NUL-terminated;
        // `found` is the vector below.
        unsafe {
            let name = (*info).dlpi_name;
            if !name.is_null() {
                let name = CStr::from_ptr(name);
                if name.to_bytes().windows(9).any(|window| window == b"libcudart") {
                    (*found.cast::<Vec<std::ffi::CString>>()).push(name.to_owned());
                }
            }
        }
        0
    }
    let mut found: Vec<std::ffi::CString> = Vec::new();
    // SAFETY: `visit` only reads each entry and pushes to `found`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&raw mut found).cast()) };
    found
}

/// The runtime's functions the timing needs, once all are found.
pub(super) fn runtime() -> Option<&'static Runtime> {
    FUNCTIONS
        .timing
        .get_or_init(|| {
            macro_rules! function {
                ($name:literal as $signature:ty) => {
                    // SAFETY: the CUDA runtime's function of that name, of that C signature.
                    unsafe { std::mem::transmute::<*mut c_void, $signature>(next_definition($name)?) }
                };
            }
            Some(Runtime {
                event_create: function!(c"cudaEventCreate" as unsafe extern "C" fn(*mut Event) -> c_int),
                event_record: function!(c"cudaEventRecord" as unsafe extern "C" fn(Event, Stream) -> c_int),
                event_query: function!(c"cudaEventQuery" as unsafe extern "C" fn(Event) -> c_int),
                event_destroy: function!(c"cudaEventDestroy" as unsafe extern "C" fn(Event) -> c_int),
                elapsed: function!(
                    c"cudaEventElapsedTime" as unsafe extern "C" fn(*mut f32, Event, Event) -> c_int
                ),
                is_capturing: function!(
                    c"cudaStreamIsCapturing" as unsafe extern "C" fn(Stream, *mut c_int) -> c_int
                ),
                get_device: function!(c"cudaGetDevice" as unsafe extern "C" fn(*mut c_int) -> c_int),
                set_device: function!(c"cudaSetDevice" as unsafe extern "C" fn(c_int) -> c_int),
                stream_create: function!(
                    c"cudaStreamCreateWithFlags" as unsafe extern "C" fn(*mut Stream, u32) -> c_int
                ),
                peek_at_last_error: function!(c"cudaPeekAtLastError" as unsafe extern "C" fn() -> c_int),
                get_last_error: function!(c"cudaGetLastError" as unsafe extern "C" fn() -> c_int),
                exchange_capture_mode: function!(
                    c"cudaThreadExchangeStreamCaptureMode" as unsafe extern "C" fn(*mut c_int) -> c_int
                ),
            })
        })
        .as_ref()
}

/// A graph launch of the runtime's (`cudaGraphLaunch` or `_ptsz`).
pub(super) type Launch = unsafe extern "C" fn(*mut c_void, Stream) -> c_int;

/// The runtime's own graph launch (`cudaGraphLaunch_ptsz` when
/// `per_thread`, else `cudaGraphLaunch`), found once it can be (not cached
/// while it cannot: a runtime loaded later is still found).
pub(super) fn real_launch(per_thread: bool) -> Option<Launch> {
    let (name, found) = if per_thread {
        (c"cudaGraphLaunch_ptsz", &FUNCTIONS.launch_per_thread)
    } else {
        (c"cudaGraphLaunch", &FUNCTIONS.launch)
    };
    if let Some(&launch) = found.get() {
        return Some(launch);
    }
    let function = next_definition(name)?;
    // SAFETY: the runtime's graph launch, of this signature.
    let launch = unsafe { std::mem::transmute::<*mut c_void, Launch>(function) };
    Some(*found.get_or_init(|| launch))
}

/// The runtime's `cudaDeviceReset`.
pub(super) type Reset = unsafe extern "C" fn() -> c_int;

/// The runtime's own `cudaDeviceReset`, looked for once.
pub(super) fn real_reset() -> Option<Reset> {
    *FUNCTIONS.reset.get_or_init(|| {
        // SAFETY: the runtime's cudaDeviceReset, of this signature.
        next_definition(c"cudaDeviceReset")
            .map(|function| unsafe { std::mem::transmute::<*mut c_void, Reset>(function) })
    })
}

/// Where the runtime's own `cudaDeviceReset` is not found: the driver's
/// reset of the current device's primary context, which is what the
/// runtime's does. Any failure reads as `cudaErrorUnknown`.
///
/// # Safety
/// As `cudaDeviceReset`.
pub(super) unsafe fn reset_through_driver() -> c_int {
    use cudarc::driver::sys as driver;
    if !crate::devices::driver_present() {
        return UNKNOWN;
    }
    let mut device: driver::CUdevice = 0;
    // SAFETY: one out-parameter, then the reset of that device's primary context.
    let reset = unsafe {
        driver::cuCtxGetDevice(&mut device) == driver::CUresult::CUDA_SUCCESS
            && driver::cuDevicePrimaryCtxReset_v2(device) == driver::CUresult::CUDA_SUCCESS
    };
    if reset { 0 } else { UNKNOWN }
}

/// `cudaErrorUnknown`.
pub(super) const UNKNOWN: c_int = 999;

/// Where the runtime's own launch is not found (a library of the program
/// built with the static runtime exports `cudaGraphLaunch` too, and binds
/// to ours), the driver's: the runtime's graphs and streams are the
/// driver's. `stream` is as the events take it: a null stream is the
/// legacy default stream, and the per-thread one is already named. Any
/// failure reads as `cudaErrorUnknown`.
///
/// # Safety
/// `exec` an instantiated graph, `stream` a stream or 0.
pub(super) unsafe fn launch_through_driver(exec: *mut c_void, stream: Stream) -> c_int {
    use cudarc::driver::sys as driver;
    if !crate::devices::driver_present() {
        return UNKNOWN;
    }
    // SAFETY: as the caller promises; the handles are the driver's.
    let result = unsafe { driver::cuGraphLaunch(exec.cast(), stream.cast()) };
    if result == driver::CUresult::CUDA_SUCCESS {
        0
    } else {
        UNKNOWN
    }
}
