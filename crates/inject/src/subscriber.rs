//! Our CUPTI subscriber and which of the program's calls call back into it:
//! the calls of [`crate::api_calls`] when they are recorded by callbacks,
//! or held for a DRAM sampler being started (`sampler_gate`), or every call
//! once the window of steps has closed, so that the next call's exit
//! detaches CUPTI. The subscribing itself, and the callback, are
//! `callbacks`'s; this is the state they and the sampler gate share.
//!
//! Below `callbacks` and `sampler_gate`; uses only `api_calls` and `locking`.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Mutex, OnceLock};

use cudarc::cupti::sys;
use kernelscope_trace::injection_settings::ApiCallRecording;

use crate::api_calls::{DRIVER_CALLS, DRIVER_DOMAIN, RUNTIME_CALLS, RUNTIME_DOMAIN, domain_of};
use crate::locking::lock;

/// The subscription, process-wide: CUPTI's callback and the sampler
/// threads reach it without a pointer of ours.
struct Subscription {
    /// Our subscriber (null: none, or forgotten before CUPTI detached).
    handle: AtomicPtr<c_void>,
    /// How the calls are recorded, once subscribed.
    recording: OnceLock<ApiCallRecording>,
    /// Whether the calls call back for the samplers ([`hold_calls_for_samplers`]).
    holding: AtomicBool,
    /// Held while [`holding`](Subscription::holding) is switched: two
    /// switches interleaved would leave some calls on and some off.
    switching: Mutex<()>,
    /// Set when the window has closed: the next API call's exit detaches CUPTI.
    detach_pending: AtomicBool,
}

static SUBSCRIPTION: Subscription = Subscription {
    handle: AtomicPtr::new(std::ptr::null_mut()),
    recording: OnceLock::new(),
    holding: AtomicBool::new(false),
    switching: Mutex::new(()),
    detach_pending: AtomicBool::new(false),
};

/// Sets how the calls are recorded (the first answer stays).
pub(crate) fn set_recording(recording: ApiCallRecording) {
    SUBSCRIPTION.recording.get_or_init(|| recording);
}

/// How the calls are recorded; `None` before subscribing.
pub(crate) fn recording() -> Option<ApiCallRecording> {
    SUBSCRIPTION.recording.get().copied()
}

/// Keeps our subscriber.
pub(crate) fn subscribed(subscriber: sys::CUpti_SubscriberHandle) {
    SUBSCRIPTION.handle.store(subscriber.cast(), Ordering::Release);
}

/// Our subscriber; null when there is none.
fn subscriber() -> sys::CUpti_SubscriberHandle {
    SUBSCRIPTION.handle.load(Ordering::Acquire).cast()
}

/// Forgets our subscription, which `cuptiFinalize` is about to end.
pub(crate) fn forget_subscriber() {
    SUBSCRIPTION.handle.store(std::ptr::null_mut(), Ordering::Release);
}

/// Has CUPTI call back (`on`) at every launch, copy, set and
/// synchronisation, or no more (unless the calls are recorded by callbacks),
/// so that the program's work waits for a DRAM sampler being started
/// ([`crate::sampler_gate`]). The sampler starts on a thread of its
/// own after the device's context exists, which took 640 ms on a loaded
/// two-GPU host: the program's first 1,881 kernels ran unsampled, and the
/// profile gave them no bytes, or a part of their bytes, without a word.
pub(crate) fn hold_calls_for_samplers(on: bool) {
    let _switching = lock(&SUBSCRIPTION.switching);
    let subscriber = subscriber();
    if subscriber.is_null()
        || (!on && recording() == Some(ApiCallRecording::Callbacks))
        || SUBSCRIPTION.holding.swap(on, Ordering::AcqRel) == on
    {
        return;
    }
    switch_calls(subscriber, on);
}

/// Has CUPTI call back at every call of [`crate::api_calls`] (`on`), or no more.
pub(crate) fn switch_calls(subscriber: sys::CUpti_SubscriberHandle, on: bool) {
    for (domain, calls) in [(RUNTIME_DOMAIN, RUNTIME_CALLS), (DRIVER_DOMAIN, DRIVER_CALLS)] {
        for &(callback, _) in calls {
            // SAFETY: `subscriber` is ours and live; an id this CUDA lacks is refused, not UB.
            unsafe {
                let _ = sys::cuptiEnableCallback(u32::from(on), subscriber, domain_of(domain), callback);
            }
        }
    }
}

/// Has CUPTI detached at the exit of the program's next API call, as
/// CUPTI's own sample detaches: every runtime and driver call calls back
/// until then. Where CUPTI will not call back, it stays attached, its
/// records off.
pub(crate) fn detach_at_next_call() {
    let subscriber = subscriber();
    if subscriber.is_null() {
        return;
    }
    SUBSCRIPTION.detach_pending.store(true, Ordering::Release);
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

/// Whether CUPTI is to be detached at an API call's exit.
pub(crate) fn detach_pending() -> bool {
    SUBSCRIPTION.detach_pending.load(Ordering::Acquire)
}

/// Takes the pending detach: true for the one caller that is to detach.
pub(crate) fn claim_detach() -> bool {
    SUBSCRIPTION.detach_pending.swap(false, Ordering::AcqRel)
}
