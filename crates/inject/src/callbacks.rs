//! CUPTI's API callbacks, for the calls a profile needs and only those:
//! launches (which NVTX range they were made in: the kernel runs later,
//! outside it), graph launches (a step of a program that replays graphs),
//! host synchronisations (the steps of a program that has neither), and
//! copies and sets. Each call becomes one [`ApiCall`], made one of two ways
//! ([`ApiCallRecording`]): by CUPTI itself, as activity records of these
//! calls only (the default: cheapest for the program), or by a callback of
//! ours on the program's thread at each call's entry and exit. A context's
//! creation gives its device's name and shape either way.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Mutex, OnceLock};

use cudarc::cupti::sys;
use kernelscope_trace::{ApiCall, ApiWhat};

/// `CUpti_CallbackDomain` values.
const RUNTIME_DOMAIN: u32 = 2;
const DRIVER_DOMAIN: u32 = 1;

/// Callback ids (stable across CUDA versions: ids are only ever appended;
/// each checked against cudarc's `CUpti_runtime_api_trace_cbid` and
/// `CUpti_driver_api_trace_cbid`). The runtime's copies are listed beyond
/// those the profile needs: the driver copy each makes inside it is then
/// known for the same call seen twice, not taken for a call of its own.
const RUNTIME_CALLS: &[(u32, ApiWhat)] = &[
    (211, ApiWhat::Launch),      // cudaLaunchKernel_v7000
    (214, ApiWhat::Launch),      // cudaLaunchKernel_ptsz_v7000
    (430, ApiWhat::Launch),      // cudaLaunchKernelExC_v11060
    (431, ApiWhat::Launch),      // cudaLaunchKernelExC_ptsz_v11060
    (269, ApiWhat::Launch),      // cudaLaunchCooperativeKernel_v9000
    (270, ApiWhat::Launch),      // cudaLaunchCooperativeKernel_ptsz_v9000
    (311, ApiWhat::GraphLaunch), // cudaGraphLaunch_v10000
    (312, ApiWhat::GraphLaunch), // cudaGraphLaunch_ptsz_v10000
    (165, ApiWhat::Sync),        // cudaDeviceSynchronize_v3020
    (126, ApiWhat::Sync),        // cudaThreadSynchronize_v3020
    (131, ApiWhat::Sync),        // cudaStreamSynchronize_v3020
    (239, ApiWhat::Sync),        // cudaStreamSynchronize_ptsz_v7000
    (137, ApiWhat::Sync),        // cudaEventSynchronize_v3020
    (31, ApiWhat::Sync),         // cudaMemcpy_v3020: waits for the copy
    (32, ApiWhat::Sync),         // cudaMemcpy2D_v3020
    (39, ApiWhat::Sync),         // cudaMemcpyToSymbol_v3020
    (40, ApiWhat::Sync),         // cudaMemcpyFromSymbol_v3020
    (47, ApiWhat::Memory),       // cudaMemcpyToSymbolAsync_v3020
    (48, ApiWhat::Memory),       // cudaMemcpyFromSymbolAsync_v3020
    (161, ApiWhat::Memory),      // cudaMemcpyPeerAsync_v4000
    (41, ApiWhat::Memory),       // cudaMemcpyAsync_v3020
    (44, ApiWhat::Memory),       // cudaMemcpy2DAsync_v3020
    (225, ApiWhat::Memory),      // cudaMemcpyAsync_ptsz_v7000
    (49, ApiWhat::Memory),       // cudaMemset_v3020
    (51, ApiWhat::Memory),       // cudaMemsetAsync_v3020
    (235, ApiWhat::Memory),      // cudaMemsetAsync_ptsz_v7000
];

const DRIVER_CALLS: &[(u32, ApiWhat)] = &[
    (307, ApiWhat::Launch),      // cuLaunchKernel
    (442, ApiWhat::Launch),      // cuLaunchKernel_ptsz
    (652, ApiWhat::Launch),      // cuLaunchKernelEx
    (653, ApiWhat::Launch),      // cuLaunchKernelEx_ptsz
    (477, ApiWhat::Launch),      // cuLaunchCooperativeKernel
    (478, ApiWhat::Launch),      // cuLaunchCooperativeKernel_ptsz
    (514, ApiWhat::GraphLaunch), // cuGraphLaunch
    (515, ApiWhat::GraphLaunch), // cuGraphLaunch_ptsz
    (17, ApiWhat::Sync),         // cuCtxSynchronize
    (800, ApiWhat::Sync),        // cuCtxSynchronize_v2
    (126, ApiWhat::Sync),        // cuStreamSynchronize
    (440, ApiWhat::Sync),        // cuStreamSynchronize_ptsz
    (121, ApiWhat::Sync),        // cuEventSynchronize
    (276, ApiWhat::Sync),        // cuMemcpyHtoD_v2
    (278, ApiWhat::Sync),        // cuMemcpyDtoH_v2
    (277, ApiWhat::Memory),      // cuMemcpyHtoDAsync_v2
    (279, ApiWhat::Memory),      // cuMemcpyDtoHAsync_v2
    (281, ApiWhat::Memory),      // cuMemcpyDtoDAsync_v2
    (306, ApiWhat::Memory),      // cuMemcpyAsync
    (216, ApiWhat::Memory),      // cuMemsetD8Async
    (220, ApiWhat::Memory),      // cuMemsetD32Async
];

/// The resource callback for a context's creation.
const CONTEXT_CREATED: u32 = 1;

/// The environment variable choosing how API calls are recorded:
/// `activity`, `callbacks` or `off` ([`ApiCallRecording`]).
pub const API_CALLS_ENV_VAR: &str = "KSCOPE_API_CALLS";

/// How the calls above are recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ApiCallRecording {
    /// CUPTI's activity records of these calls alone: CUPTI writes each into
    /// its buffer; the NVTX range a call was made in is found afterwards
    /// from its thread and time ([`kernelscope_trace::RANGE_BY_TIME`]).
    Activity,
    /// A callback of ours at each call's entry and exit, which reads the
    /// thread's open range then and there: costs the program more.
    Callbacks,
    /// None: kernels, copies and sets only (steps fall back to the whole
    /// run, kernels have no NVTX scope); for measuring what the rest costs.
    Off,
}

impl ApiCallRecording {
    /// The one `$KSCOPE_API_CALLS` asks for (default: activity); an unknown
    /// value is said on stderr and the default used.
    pub(crate) fn from_environment() -> ApiCallRecording {
        match std::env::var(API_CALLS_ENV_VAR).as_deref() {
            Err(_) | Ok("activity") => ApiCallRecording::Activity,
            Ok("callbacks") => ApiCallRecording::Callbacks,
            Ok("off") => ApiCallRecording::Off,
            Ok(other) => {
                eprintln!(
                    "kscope profile: {API_CALLS_ENV_VAR}={other} is not activity, callbacks or off; recording activity"
                );
                ApiCallRecording::Activity
            }
        }
    }
}

/// Subscribes to CUPTI's callbacks (a context's creation always; the calls
/// above when `recording` asks for callbacks) or has CUPTI record the calls
/// above as activity (a call of a newer CUDA than this list knows is simply
/// not seen). Without `with_subscriber` (an overhead experiment's
/// [`crate::OMIT_ENV_VAR`]) only the activity records are set up.
pub(crate) fn subscribe(recording: ApiCallRecording, with_subscriber: bool) -> Result<(), String> {
    // Without a subscriber nothing calls back, so calls asked of callbacks go unrecorded.
    let recording = match recording {
        ApiCallRecording::Callbacks if !with_subscriber => ApiCallRecording::Off,
        other => other,
    };
    if recording == ApiCallRecording::Activity {
        name_threads_by_system_id()?;
    }
    RECORDING.get_or_init(|| recording);
    if !with_subscriber {
        return Ok(());
    }
    let mut subscriber: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
    // SAFETY: one out-parameter; the callback is an `extern "C"` function of CUPTI's shape.
    let subscribed = unsafe { sys::cuptiSubscribe(&mut subscriber, Some(on_callback), std::ptr::null_mut()) };
    if subscribed != sys::CUptiResult::CUPTI_SUCCESS {
        return Err(format!(
            "CUPTI refused a subscriber ({subscribed:?}): another profiler (Nsight, torch.profiler) holds it"
        ));
    }
    SUBSCRIBER.store(subscriber.cast(), Ordering::Release);
    if recording == ApiCallRecording::Callbacks {
        switch_calls(subscriber, true);
    }
    if crate::devices::pm_interval_ns().is_some() {
        hold_calls_for_samplers(true);
    }
    // SAFETY: as above.
    let resource = unsafe {
        sys::cuptiEnableCallback(
            1,
            subscriber,
            sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE,
            CONTEXT_CREATED,
        )
    };
    if resource != sys::CUptiResult::CUPTI_SUCCESS {
        return Err(format!("CUPTI refused the context callback ({resource:?})"));
    }
    Ok(())
}

/// Has CUPTI call back (`on`) at every launch, copy, set and
/// synchronisation, or no more (unless the calls are recorded by callbacks),
/// so that the program's work waits for a DRAM sampler being started
/// ([`crate::sampler_gate`]). The sampler starts on a thread of its
/// own after the device's context exists, which took 640 ms on a loaded
/// two-GPU host: the program's first 1,881 kernels ran unsampled, and the
/// profile gave them no bytes, or a part of their bytes, without a word.
pub(crate) fn hold_calls_for_samplers(on: bool) {
    // One switch at a time: two interleaved would leave some calls on and some off.
    static SWITCHING: Mutex<()> = Mutex::new(());
    let _switching = crate::lock(&SWITCHING);
    let subscriber: sys::CUpti_SubscriberHandle = SUBSCRIBER.load(Ordering::Acquire).cast();
    if subscriber.is_null()
        || (!on && RECORDING.get() == Some(&ApiCallRecording::Callbacks))
        || HOLDING.swap(on, Ordering::AcqRel) == on
    {
        return;
    }
    switch_calls(subscriber, on);
}

/// Has CUPTI call back at every call above (`on`), or no more.
fn switch_calls(subscriber: sys::CUpti_SubscriberHandle, on: bool) {
    for (domain, calls) in [(RUNTIME_DOMAIN, RUNTIME_CALLS), (DRIVER_DOMAIN, DRIVER_CALLS)] {
        for &(callback, _) in calls {
            // SAFETY: `subscriber` is ours and live; an id this CUDA lacks is refused, not UB.
            unsafe {
                let _ = sys::cuptiEnableCallback(u32::from(on), subscriber, domain_of(domain), callback);
            }
        }
    }
}

/// Whether the calls call back for the samplers ([`hold_calls_for_samplers`]).
static HOLDING: AtomicBool = AtomicBool::new(false);

/// Our subscriber (null: none).
static SUBSCRIBER: AtomicPtr<std::ffi::c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Forgets our subscription, which `cuptiFinalize` is about to end.
pub(crate) fn forget_subscriber() {
    SUBSCRIBER.store(std::ptr::null_mut(), Ordering::Release);
}

/// Set when the window has closed: the next API call's exit detaches CUPTI.
static DETACH_PENDING: AtomicBool = AtomicBool::new(false);

/// Has CUPTI detached at the exit of the program's next API call, as
/// CUPTI's own sample detaches: every runtime and driver call calls back
/// until then. Where CUPTI will not call back, it stays attached, its
/// records off.
pub(crate) fn detach_at_next_call() {
    let subscriber: sys::CUpti_SubscriberHandle = SUBSCRIBER.load(Ordering::Acquire).cast();
    if subscriber.is_null() {
        return;
    }
    DETACH_PENDING.store(true, Ordering::Release);
    for domain in [
        sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API,
        sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API,
    ] {
        // SAFETY: `subscriber` is ours and live (unsubscribed only by the detach).
        let enabled = unsafe { sys::cuptiEnableDomain(1, subscriber, domain) };
        if enabled != sys::CUptiResult::CUPTI_SUCCESS {
            eprintln!(
                "kscope profile: CUPTI stays attached after the window, its records off ({enabled:?}); the rest of the run pays for it"
            );
        }
    }
}

/// How the calls are recorded, once subscribed.
static RECORDING: OnceLock<ApiCallRecording> = OnceLock::new();

/// CUPTI's activity records name threads as `gettid` does, as our NVTX ranges do.
fn name_threads_by_system_id() -> Result<(), String> {
    // SAFETY: a plain value, set before any record is made.
    let named = unsafe {
        sys::cuptiSetThreadIdType(sys::CUpti_ActivityThreadIdType::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
    };
    if named != sys::CUptiResult::CUPTI_SUCCESS {
        return Err(format!(
            "CUPTI refused to name threads by their system id ({named:?})"
        ));
    }
    Ok(())
}

/// Starts (`on`) or stops CUPTI writing an activity record of each call
/// above, when the calls are recorded as activity. A whole run records
/// these calls alone (per-function records without the whole kind on),
/// which must be switched on before the first context exists: switched on
/// later, for a window of steps, CUPTI recorded none on the H100. A window
/// switches CUPTI's whole runtime and driver kinds instead, and the records
/// of other calls are dropped as they are read.
pub(crate) fn record_calls_as_activity(on: bool) -> Result<(), String> {
    if RECORDING.get() != Some(&ApiCallRecording::Activity) {
        return Ok(());
    }
    if crate::window::windowed() {
        for kind in [
            sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_RUNTIME,
            sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_DRIVER,
        ] {
            let switched = if on {
                cudarc::cupti::result::activity::enable(kind)
            } else {
                cudarc::cupti::result::activity::disable(kind)
            };
            switched.map_err(|error| format!("CUPTI refused to switch {kind:?}: {error}"))?;
        }
        return Ok(());
    }
    let mut switched = 0;
    for &(callback, _) in RUNTIME_CALLS {
        // SAFETY: plain values; an id this CUDA lacks is refused, not UB.
        let result = unsafe { sys::cuptiActivityEnableRuntimeApi(callback, u8::from(on)) };
        switched += usize::from(result == sys::CUptiResult::CUPTI_SUCCESS);
    }
    for &(callback, _) in DRIVER_CALLS {
        // SAFETY: as above.
        let result = unsafe { sys::cuptiActivityEnableDriverApi(callback, u8::from(on)) };
        switched += usize::from(result == sys::CUptiResult::CUPTI_SUCCESS);
    }
    if switched == 0 {
        return Err(format!(
            "CUPTI records no single API calls (cuptiActivityEnableRuntimeApi); set {API_CALLS_ENV_VAR}=callbacks"
        ));
    }
    Ok(())
}

/// CUPTI's activity record of a runtime (`driver` false) or driver call as
/// an [`ApiCall`] whose range is to be found by time; `None` for a call
/// that is not one of ours.
pub(crate) fn api_call_of(record: &sys::CUpti_ActivityAPI, driver: bool) -> Option<ApiCall> {
    let domain = if driver { DRIVER_DOMAIN } else { RUNTIME_DOMAIN };
    let what = what_of(domain, record.cbid)?;
    Some(ApiCall {
        start_ns: record.start,
        end_ns: record.end.max(record.start),
        thread: u64::from(record.threadId),
        range: kernelscope_trace::RANGE_BY_TIME,
        correlation: record.correlationId,
        callback: record.cbid,
        domain: u32::from(driver),
        what: what as u32,
    })
}

fn domain_of(domain: u32) -> sys::CUpti_CallbackDomain {
    if domain == RUNTIME_DOMAIN {
        sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API
    } else {
        sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API
    }
}

/// What the call `callback` of `domain` does, when it is one of ours.
fn what_of(domain: u32, callback: u32) -> Option<ApiWhat> {
    let calls = match domain {
        RUNTIME_DOMAIN => RUNTIME_CALLS,
        DRIVER_DOMAIN => DRIVER_CALLS,
        _ => return None,
    };
    calls
        .iter()
        .find(|&&(id, _)| id == callback)
        .map(|&(_, what)| what)
}

unsafe extern "C" fn on_callback(
    _userdata: *mut c_void,
    domain: sys::CUpti_CallbackDomain,
    callback: sys::CUpti_CallbackId,
    data: *const c_void,
) {
    let _ = std::panic::catch_unwind(|| {
        let domain = domain as u32;
        if domain == sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE as u32 {
            if callback == CONTEXT_CREATED {
                // SAFETY: for the resource domain CUPTI passes a `CUpti_ResourceData`.
                let context = unsafe { (*(data as *const sys::CUpti_ResourceData)).context };
                crate::devices::record_device(context);
            }
            return;
        }
        // SAFETY: for the API domains CUPTI passes a `CUpti_CallbackData`.
        let site = unsafe { (*(data as *const sys::CUpti_CallbackData)).callbackSite };
        if site == sys::CUpti_ApiCallbackSite::CUPTI_API_ENTER {
            crate::sampler_gate::wait();
        }
        if DETACH_PENDING.load(Ordering::Acquire) {
            if site == sys::CUpti_ApiCallbackSite::CUPTI_API_EXIT
                && DETACH_PENDING.swap(false, Ordering::AcqRel)
            {
                crate::collection::detach();
            }
            return;
        }
        // The calls may call back only to wait for the samplers.
        if RECORDING.get() != Some(&ApiCallRecording::Callbacks) {
            return;
        }
        let Some(what) = what_of(domain, callback) else {
            return;
        };
        let entering = site == sys::CUpti_ApiCallbackSite::CUPTI_API_ENTER;
        if domain == RUNTIME_DOMAIN {
            // The runtime launches through the driver: the driver calls it
            // makes inside one of ours are that call, seen twice.
            RUNTIME_DEPTH.with(|depth| {
                depth.set(if entering {
                    depth.get() + 1
                } else {
                    depth.get().saturating_sub(1)
                })
            });
        } else if RUNTIME_DEPTH.with(|depth| depth.get()) > 0 {
            return;
        }
        if !crate::window::collecting() {
            return;
        }
        // SAFETY: for the API domains CUPTI passes a `CUpti_CallbackData`,
        // whose `correlationData` is a slot kept from enter to exit of one call.
        let data = unsafe { &*(data as *const sys::CUpti_CallbackData) };
        let now = crate::clock::now_ns();
        if entering {
            if !data.correlationData.is_null() {
                // SAFETY: see above.
                unsafe { *data.correlationData = now };
            }
            return;
        }
        let start = if data.correlationData.is_null() {
            now
        } else {
            // SAFETY: see above; written at enter.
            unsafe { *data.correlationData }
        };
        crate::sink::push_call(ApiCall {
            start_ns: start,
            end_ns: now,
            thread: crate::clock::thread_id(),
            range: crate::nvtx::current_range(),
            correlation: data.correlationId,
            callback,
            domain: u32::from(domain == DRIVER_DOMAIN),
            what: what as u32,
        });
    });
}

thread_local! {
    /// Runtime calls of ours under way on the thread (entered, not exited).
    static RUNTIME_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}
