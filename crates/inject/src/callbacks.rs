//! CUPTI's API callbacks, for the calls of [`crate::api_calls`] and only
//! those. Each call becomes one [`ApiCall`], made one of two ways
//! ([`ApiCallRecording`]): by CUPTI itself, as activity records of these
//! calls only (the default: cheapest for the program), or by our callback
//! on the program's thread at each call's entry and exit. A context's
//! creation gives its device's name and shape either way. The callback also
//! holds the program's calls while a DRAM sampler starts (`sampler_gate`)
//! and detaches CUPTI at the first call's exit after a window of steps
//! closed.
//!
//! Uses `subscriber` (the subscription's state), `api_calls`, `devices`,
//! `sampler_gate`, `window`, `sink`, `clock`, `threads` and `settings`;
//! used by `collection`, which decides when CUPTI is attached.

use std::ffi::c_void;

use cudarc::cupti::{result as cupti, sys};
use kernelscope_trace::ApiCall;
use kernelscope_trace::injection_settings::{API_CALLS_VARIABLE, ApiCallRecording};

use crate::api_calls::{DRIVER_CALLS, DRIVER_DOMAIN, RUNTIME_CALLS, RUNTIME_DOMAIN, what_of};
use crate::subscriber;

/// The resource callback for a context's creation.
const CONTEXT_CREATED: u32 = 1;

/// Subscribes to CUPTI's callbacks (a context's creation always; the calls
/// when `recording` asks for callbacks) or has CUPTI record the calls as
/// activity (a call of a newer CUDA than the list knows is simply not
/// seen). Without `with_subscriber` (an overhead experiment leaves it out)
/// only the activity records are set up.
pub(crate) fn subscribe(recording: ApiCallRecording, with_subscriber: bool) -> Result<(), String> {
    // Without a subscriber nothing calls back, so calls asked of callbacks go unrecorded.
    let recording = match recording {
        ApiCallRecording::Callbacks if !with_subscriber => ApiCallRecording::Off,
        other => other,
    };
    if recording == ApiCallRecording::Activity {
        name_threads_by_system_id()?;
    }
    subscriber::set_recording(recording);
    if !with_subscriber {
        return Ok(());
    }
    let mut handle: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
    // SAFETY: one out-parameter; the callback is an `extern "C"` function of CUPTI's shape.
    let subscribed = unsafe { sys::cuptiSubscribe(&mut handle, Some(on_callback), std::ptr::null_mut()) };
    if subscribed != sys::CUptiResult::CUPTI_SUCCESS {
        return Err(format!(
            "CUPTI refused a subscriber ({subscribed:?}): another profiler (Nsight, torch.profiler) holds it"
        ));
    }
    subscriber::subscribed(handle);
    if recording == ApiCallRecording::Callbacks {
        subscriber::switch_calls(handle, true);
    }
    if crate::settings::settings().dram_sampling_interval_ns().is_some() {
        subscriber::hold_calls_for_samplers(true);
    }
    // SAFETY: as above.
    let resource = unsafe {
        sys::cuptiEnableCallback(
            1,
            handle,
            sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE,
            CONTEXT_CREATED,
        )
    };
    if resource != sys::CUptiResult::CUPTI_SUCCESS {
        return Err(format!("CUPTI refused the context callback ({resource:?})"));
    }
    Ok(())
}

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

/// Starts (`on`) or stops CUPTI writing an activity record of each call,
/// when the calls are recorded as activity. A whole run records these
/// calls alone (per-function records without the whole kind on), which
/// must be switched on before the first context exists: switched on later,
/// for a window of steps, CUPTI recorded none on the H100. A window
/// switches CUPTI's whole runtime and driver kinds instead, and the records
/// of other calls are dropped as they are read.
pub(crate) fn record_calls_as_activity(on: bool) -> Result<(), String> {
    if subscriber::recording() != Some(ApiCallRecording::Activity) {
        return Ok(());
    }
    if crate::settings::settings().windowed() {
        for kind in [
            sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_RUNTIME,
            sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_DRIVER,
        ] {
            let switched = if on {
                cupti::activity::enable(kind)
            } else {
                cupti::activity::disable(kind)
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
            "CUPTI records no single API calls (cuptiActivityEnableRuntimeApi); set {API_CALLS_VARIABLE}=callbacks"
        ));
    }
    Ok(())
}

/// Hands every record CUPTI holds to the file, then detaches CUPTI. Called
/// from CUPTI's callback at the exit of an API call, where CUPTI's own
/// sample detaches (elsewhere, another thread inside CUDA can crash it).
fn detach() {
    let _ = cupti::activity::flush_all(1);
    // Not unsubscribed: we are inside the subscriber's callback, and
    // cuptiFinalize ends every subscription (as NVIDIA's cupti_finalize
    // sample detaches).
    subscriber::forget_subscriber();
    // SAFETY: no record is enabled and the buffers are flushed; CUPTI
    // detaches from the process and calls none of our functions again.
    let finalized = unsafe { sys::cuptiFinalize() };
    if finalized != sys::CUptiResult::CUPTI_SUCCESS {
        eprintln!(
            "kscope profile: CUPTI would not detach after the window ({finalized:?}); the rest of the run pays for it"
        );
    }
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
        if subscriber::detach_pending() {
            if site == sys::CUpti_ApiCallbackSite::CUPTI_API_EXIT && subscriber::claim_detach() {
                detach();
            }
            return;
        }
        // The calls may call back only to wait for the samplers.
        if subscriber::recording() != Some(ApiCallRecording::Callbacks) {
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
            thread: crate::threads::thread_id(),
            range: crate::threads::current_range(),
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
