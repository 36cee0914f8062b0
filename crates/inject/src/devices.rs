//! The devices of the profiled process: each described once (its name and
//! shape, for the profile's conditions), and, when DRAM bytes are asked
//! for, its sampler started on a thread of its own once its context exists.
//!
//! Uses `pm` and `sampler_gate` (a sampler's start), `sink`, `settings` and
//! `locking`; used by `callbacks` (a context's creation), `collection` and
//! `graph_events` (a device's first timed launch).

use std::collections::BTreeSet;
use std::ffi::CStr;
use std::sync::{Mutex, OnceLock};

use cudarc::cupti::sys;
use cudarc::driver::sys as driver;
use kernelscope_trace::Device;

/// What is known of the devices, process-wide: CUPTI's callback, the
/// program's graph launches and the sampler threads ask.
struct Devices {
    /// Devices already described.
    described: Mutex<BTreeSet<u32>>,
    /// Whether the CUDA driver library loads, tried once.
    driver_present: OnceLock<bool>,
}

static DEVICES: Devices = Devices {
    described: Mutex::new(BTreeSet::new()),
    driver_present: OnceLock::new(),
};

/// Describes the device of the calling thread's current context, if any:
/// for CUPTI attached after the program made its context.
pub(crate) fn describe_current_device() {
    let mut context: driver::CUcontext = std::ptr::null_mut();
    // SAFETY: one out-parameter; the driver is initialised (CUDA started).
    if unsafe { driver::cuCtxGetCurrent(&mut context) } == driver::CUresult::CUDA_SUCCESS
        && !context.is_null()
    {
        record_device(context);
    }
}

/// Describes `context`'s device, once per device, and starts its DRAM sampler when asked.
pub(crate) fn record_device(context: driver::CUcontext) {
    let mut ordinal = 0u32;
    // SAFETY: `context` is the one CUPTI just reported created; one out-parameter.
    if unsafe { sys::cuptiGetDeviceId(context, &mut ordinal) } != sys::CUptiResult::CUPTI_SUCCESS {
        return;
    }
    if !describe_device(ordinal) {
        return;
    }
    if let Some(interval) = crate::settings::settings().dram_sampling_interval_ns() {
        // Not here: setting up the sampler inside CUPTI's own callback, on
        // the thread creating the context, hung. A thread of its own does it
        // with the new context current, a moment later.
        // The program's calls wait for it (`hold_calls_for_samplers`).
        let context = context as usize;
        crate::sampler_gate::starting();
        let started = std::thread::Builder::new()
            .name("kscope-pm-start".into())
            .spawn(move || {
                let _started = crate::sampler_gate::StartedOnDrop;
                crate::sampler_gate::starter_thread();
                // SAFETY: the context CUPTI just reported created, made
                // current on this thread only; it lives until the program
                // destroys it, after the sampler is set up or not.
                unsafe { driver::cuCtxSetCurrent(context as driver::CUcontext) };
                if let Err(problem) = crate::pm::start(ordinal, interval) {
                    eprintln!("kscope profile: no DRAM bytes for device {ordinal}: {problem}");
                }
            });
        if let Err(error) = started {
            eprintln!("kscope profile: no DRAM bytes for device {ordinal}: starting a thread: {error}");
            crate::sampler_gate::started();
        }
    }
}

/// Whether the CUDA driver library loads, tried once (each try opens and
/// closes it, too much for every graph launch on the driver's fallbacks).
/// A program timed by events may run on a runtime without one: the tests'
/// stand-in.
pub(crate) fn driver_present() -> bool {
    // SAFETY: only tries to load the driver by its known names.
    *DEVICES
        .driver_present
        .get_or_init(|| unsafe { driver::is_culib_present() })
}

/// Queues the name and shape of device `ordinal`, once per device: whether
/// it was new. The driver is initialised (a context exists) where it loads.
pub(crate) fn describe_device(ordinal: u32) -> bool {
    if !driver_present() {
        return false;
    }
    let mut described = crate::locking::lock(&DEVICES.described);
    if !described.insert(ordinal) {
        return false;
    }
    drop(described);
    let mut device: driver::CUdevice = 0;
    let mut name = [0 as std::ffi::c_char; 256];
    let mut memory = 0usize;
    let attribute = |attribute: driver::CUdevice_attribute, device: driver::CUdevice| {
        let mut value = 0;
        // SAFETY: one out-parameter for a device the driver gave us.
        unsafe { driver::cuDeviceGetAttribute(&mut value, attribute, device) };
        value.max(0) as u32
    };
    // SAFETY: the driver is loaded and initialised (a context exists);
    // `name` holds 256 bytes and is NUL-terminated by the driver.
    let name = unsafe {
        if driver::cuDeviceGet(&mut device, ordinal as i32) != driver::CUresult::CUDA_SUCCESS {
            return true;
        }
        driver::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, device);
        driver::cuDeviceTotalMem_v2(&mut memory, device);
        CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned()
    };
    use driver::CUdevice_attribute as Attribute;
    crate::sink::push_device(
        Device {
            memory_bytes: memory as u64,
            ordinal,
            name: 0,
            major: attribute(Attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
            minor: attribute(Attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
            multiprocessors: attribute(Attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device),
            padding: 0,
        },
        &name,
    );
    true
}
