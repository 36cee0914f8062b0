//! DRAM bytes over time, sampled in the profiled process by CUPTI's PM sampling
//! (12.6+): the device's monitors count the bytes its DRAM reads and writes every
//! few microseconds; a thread decodes them into [`PmSample`] frames, whose bytes
//! kscope gives to the kernels that ran in each (kernelscope's
//! `profile/injected/bytes/`), the only bytes a foreign kernel has. It needs
//! profiling rights, a GA10x or later GPU and the device to itself (one sampler
//! per device, machine-wide); without them [`start`] says why and the program
//! runs on without bytes. Sample times are on the process's clock (CUPTI's).
//!
//! Uses `sink`, `clock` and `locking`; `devices` starts a device's sampler,
//! `exit` stops them all.

use std::ffi::{CStr, CString};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use cudarc::cupti::sys;
use kernelscope_trace::PmSample;

use crate::locking::lock;

/// Shorter intervals lose samples with no overflow reported (at 1 µs they
/// stopped after about 9 ms on an H100), so none is shorter than this, ns.
const SHORTEST_INTERVAL_NS: u64 = 5_000;

/// Device memory for the samples between decodes: far more than 10 ms of them, so a late decode loses none.
const HARDWARE_BUFFER_BYTES: usize = 512 << 20;

/// Samples one decode can hold; the rest wait for the next decode.
const SAMPLES_PER_DECODE: u32 = 4096;

/// How often the recorded samples are decoded (kineto's period).
const DECODE_PERIOD: Duration = Duration::from_millis(10);

/// Decodes of a device in a row at most: a CUPTI always saying "full" cannot hold the thread.
const MOST_DECODES: usize = 256;

/// How long [`stop_all`] waits for the decode thread to let go of the samplers.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// Why there are no bytes without profiling rights, and how to get them.
const NO_RIGHTS: &str =
    "no profiling rights (run as root, or load the nvidia module with NVreg_RestrictProfilingToAdminUsers=0)";

/// Why there are no bytes when the chip lacks the metrics.
const NO_METRIC: &str = "the chip has no PM sampling metric dram__bytes_read.sum or dram__bytes_write.sum";

/// Why there are no bytes when another sampler has the device.
const SAMPLED_ALREADY: &str = "the device is sampled already (by another process or profiler)";

/// The metrics sampled, in the order their values come back.
const METRICS: [&CStr; 2] = [c"dram__bytes_read.sum", c"dram__bytes_write.sum"];

/// The parameters of CUPTI's `_function` as NVIDIA's samples make them:
/// `structSize` the struct's size (which tells CUPTI which version of it we
/// know), every other field zero. (The header's `_STRUCT_SIZE`, the end of
/// the last field, is the size but for DecodeData's, whose call sets it.)
///
/// # Safety
/// `_function` is CUPTI's: its parameters are integers, pointers and enums
/// whose first value is 0 (all zeroes is a valid value), `structSize` first.
unsafe fn parameters_of<T>(_function: unsafe fn(*mut T) -> sys::CUptiResult) -> T {
    // SAFETY: as the caller promises.
    let mut parameters: T = unsafe { std::mem::zeroed() };
    let size = (&raw mut parameters).cast::<usize>();
    // SAFETY: as the caller promises, `T` begins with `size_t structSize`.
    unsafe { size.write(size_of::<T>()) };
    parameters
}

/// Calls CUPTI's `function` with its parameters filled as
/// [`parameters_of`] and then the fields given: the parameters (with what
/// CUPTI wrote), or a failure named after the function; or (`raw`) the
/// result beside the parameters. Every pointer given outlives the call.
macro_rules! call {
    (raw $function:ident; $($field:ident: $value:expr),* $(,)?) => {{
        // SAFETY: the function is CUPTI's.
        let mut parameters = unsafe { parameters_of(sys::$function) };
        $(parameters.$field = $value;)*
        // SAFETY: the parameters are filled as the function's header asks.
        (unsafe { sys::$function(&mut parameters) }, parameters)
    }};
    ($function:ident; $($field:ident: $value:expr),* $(,)?) => {{
        let (result, parameters) = call!(raw $function; $($field: $value),*);
        check(result, stringify!($function)).map(|()| parameters)
    }};
}

/// One device's sampler and the images CUPTI reads and writes.
struct Sampler {
    /// The device's ordinal.
    ordinal: u32,
    /// CUPTI's host object, which turns raw counters into the metrics, and
    /// the device's sampler; null until made.
    host: *mut sys::CUpti_Profiler_Host_Object,
    sampling: *mut sys::CUpti_PmSampling_Object,
    /// The chip's name and counters, kept while the host object may point into them.
    chip: CString,
    availability: Vec<u8>,
    /// The configuration image of the two metrics, and where samples are decoded to.
    config: Vec<u8>,
    counter_data: Vec<u8>,
    /// When sampling started, ns on the process's clock: the first sample
    /// spans from the configuration to the start, and is dropped.
    started_ns: u64,
    /// Whether it runs (it is stopped before it is disabled), whether its
    /// overflow was told, whether decoding it failed (told once, then no more).
    running: bool,
    overflow_told: bool,
    failed: bool,
}

// SAFETY: the pointers are CUPTI's handles of a device's sampler, not of a thread (kineto and
// XLA decode on a thread of their own, as here), and every use is under the samplers' lock.
unsafe impl Send for Sampler {}

/// The process's PM sampling: the sampler threads, the decode thread and
/// the exit handler reach it, and CUPTI's sampler is one per device per machine.
struct PmSampling {
    /// The devices being sampled.
    samplers: Mutex<Vec<Sampler>>,
    /// Set by [`stop_all`]: no sampler starts after it, and the decode thread ends.
    stopped: AtomicBool,
    /// `cuptiProfilerInitialize`'s answer, asked once for every device.
    profiler: OnceLock<Result<(), String>>,
    /// Whether the decode thread started, asked once.
    decoder: OnceLock<Result<(), String>>,
}

static PM_SAMPLING: PmSampling = PmSampling {
    samplers: Mutex::new(Vec::new()),
    stopped: AtomicBool::new(false),
    profiler: OnceLock::new(),
    decoder: OnceLock::new(),
};

/// Samples `dram__bytes_read.sum` and `dram__bytes_write.sum` of device
/// `device_ordinal` every `interval_ns` (at least 5 µs) from now until
/// [`stop_all`]; the samples are queued for the record file as they are
/// decoded. An error is one line naming the device and why.
pub(crate) fn start(device_ordinal: u32, interval_ns: u64) -> Result<(), String> {
    let named = |problem: String| format!("cuda:{device_ordinal}: {problem}");
    ensure_decoder().map_err(named)?;
    let interval_ns = interval_ns.max(SHORTEST_INTERVAL_NS);
    let sampler = std::panic::catch_unwind(|| configure(device_ordinal, interval_ns))
        .unwrap_or_else(|_| Err("setting up PM sampling panicked".into()))
        .map_err(named)?;
    let mut samplers = lock(&PM_SAMPLING.samplers);
    if PM_SAMPLING.stopped.load(Ordering::SeqCst) {
        // Dropping it stops and disables it.
        return Err(named("the process is ending".into()));
    }
    samplers.push(sampler);
    Ok(())
}

/// Queues what every device's sampler recorded last and stops decoding;
/// once, at the process's exit. The samplers are neither stopped, disabled
/// nor deinitialised: at exit CUDA may already be tearing the context down,
/// and disabling then aborted the process (SIGABRT, on an H100 with CUDA
/// 13.0); the process's end releases them. Waits at most [`STOP_WAIT`] for
/// the decode thread: stuck in CUPTI, it costs the last samples, not a hung exit.
pub(crate) fn stop_all() {
    if PM_SAMPLING.stopped.swap(true, Ordering::SeqCst) {
        return;
    }
    let deadline = Instant::now() + STOP_WAIT;
    let stopping = loop {
        match PM_SAMPLING.samplers.try_lock() {
            Ok(mut samplers) => break std::mem::take(&mut *samplers),
            Err(TryLockError::Poisoned(poisoned)) => break std::mem::take(&mut *poisoned.into_inner()),
            Err(TryLockError::WouldBlock) if Instant::now() > deadline => return,
            Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_millis(1)),
        }
    };
    let mut samples = Vec::new();
    for mut sampler in stopping {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if !sampler.failed {
                sampler.decode_or_tell(&mut samples);
            }
        }));
        std::mem::forget(sampler);
    }
    crate::sink::push_samples(&samples);
}

/// Starts the decode thread, once per process; its answer to every call.
fn ensure_decoder() -> Result<(), String> {
    let decoder = || {
        let _ = std::panic::catch_unwind(|| {
            while !PM_SAMPLING.stopped.load(Ordering::SeqCst) {
                std::thread::sleep(DECODE_PERIOD);
                let mut samples = Vec::new();
                for sampler in lock(&PM_SAMPLING.samplers)
                    .iter_mut()
                    .filter(|sampler| !sampler.failed)
                {
                    sampler.decode_or_tell(&mut samples);
                }
                crate::sink::push_samples(&samples);
            }
        });
    };
    let spawn = || {
        std::thread::Builder::new()
            .name("kscope-pm".into())
            .spawn(decoder)
            .map(drop)
            .map_err(|error| format!("starting the PM sampling decode thread: {error}"))
    };
    PM_SAMPLING.decoder.get_or_init(spawn).clone()
}

/// `Ok` for success; else the call's failure, saying why where it can.
fn check(result: sys::CUptiResult, call: &str) -> Result<(), String> {
    use sys::CUptiResult::*;
    let why = match (result, call) {
        (CUPTI_SUCCESS, _) => return Ok(()),
        (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES | CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES, _) => {
            NO_RIGHTS
        }
        (CUPTI_ERROR_INVALID_METRIC_NAME, _) => NO_METRIC,
        (CUPTI_ERROR_INVALID_OPERATION, "cuptiPmSamplingEnable") => SAMPLED_ALREADY,
        (_, "cuptiPmSamplingGetCounterAvailability") => "another profiler on the device?",
        _ => return Err(format!("{call} failed ({result:?})")),
    };
    Err(format!("{call} failed ({result:?}): {why}"))
}

/// Checks this CUPTI can sample, names the device's chip, and sets up and
/// starts its sampler.
fn configure(ordinal: u32, interval_ns: u64) -> Result<Sampler, String> {
    // SAFETY: only looks a symbol up in the libcupti already loaded.
    if unsafe { sys::culib().get::<unsafe extern "C" fn()>(b"cuptiPmSamplingEnable\0") }.is_err() {
        return Err("this CUPTI lacks PM sampling (12.6+)".into());
    }
    PM_SAMPLING
        .profiler
        .get_or_init(|| call!(cuptiProfilerInitialize;).map(drop))
        .clone()?;
    let chip = call!(cuptiDeviceGetChipName; deviceIndex: ordinal as usize)?;
    if chip.pChipName.is_null() {
        return Err("CUPTI names no chip".into());
    }
    // SAFETY: CUPTI gave a NUL-terminated name it keeps.
    let chip = unsafe { CStr::from_ptr(chip.pChipName) }.to_owned();
    let mut sampler = Sampler {
        ordinal,
        host: null_mut(),
        sampling: null_mut(),
        chip,
        availability: Vec::new(),
        config: Vec::new(),
        counter_data: Vec::new(),
        started_ns: 0,
        running: false,
        overflow_told: false,
        failed: false,
    };
    // On an error, dropping the sampler undoes what was done.
    sampler.configure_host()?;
    sampler.enable(interval_ns)?;
    Ok(sampler)
}

impl Sampler {
    /// Builds the configuration image of the two metrics for the chip, as
    /// far as its counters are free, and checks it takes one pass.
    fn configure_host(&mut self) -> Result<(), String> {
        let index = self.ordinal as usize;
        // Without an image CUPTI gives its size; then fills one of that size.
        let size = call!(cuptiPmSamplingGetCounterAvailability; deviceIndex: index)?;
        self.availability = vec![0; size.counterAvailabilityImageSize];
        call!(cuptiPmSamplingGetCounterAvailability; deviceIndex: index,
            counterAvailabilityImageSize: self.availability.len(),
            pCounterAvailabilityImage: self.availability.as_mut_ptr())?;
        // The name and image live in `self`, as long as the host object.
        let host = call!(cuptiProfilerHostInitialize;
            profilerType: sys::CUpti_ProfilerType::CUPTI_PROFILER_TYPE_PM_SAMPLING,
            pChipName: self.chip.as_ptr(), pCounterAvailabilityImage: self.availability.as_ptr())?;
        self.host = host.pHostObject;
        let mut names = METRICS.map(CStr::as_ptr);
        call!(cuptiProfilerHostConfigAddMetrics;
            pHostObject: self.host, ppMetricNames: names.as_mut_ptr(), numMetrics: names.len())?;
        let size = call!(cuptiProfilerHostGetConfigImageSize; pHostObject: self.host)?;
        self.config = vec![0; size.configImageSize];
        call!(cuptiProfilerHostGetConfigImage; pHostObject: self.host,
            configImageSize: self.config.len(), pConfigImage: self.config.as_mut_ptr())?;
        let passes = call!(cuptiProfilerHostGetNumOfPasses;
            configImageSize: self.config.len(), pConfigImage: self.config.as_mut_ptr())?;
        match passes.numOfPasses {
            1 => Ok(()),
            other => Err(format!("the metrics need {other} passes, not 1")),
        }
    }

    /// Enables the device's sampler, configures it and starts it.
    fn enable(&mut self, interval_ns: u64) -> Result<(), String> {
        use sys::CUpti_PmSampling_HardwareBuffer_AppendMode as AppendMode;
        use sys::CUpti_PmSampling_TriggerMode as TriggerMode;
        let enable = call!(cuptiPmSamplingEnable; deviceIndex: self.ordinal as usize)?;
        self.sampling = enable.pPmSamplingObject;
        // The configuration image lives in `self`. Turing and GA100 cannot
        // sample by time; GA10x (sm_86) and later can.
        call!(cuptiPmSamplingSetConfig; pPmSamplingObject: self.sampling,
            configSize: self.config.len(), pConfig: self.config.as_ptr(),
            hardwareBufferSize: HARDWARE_BUFFER_BYTES, samplingInterval: interval_ns,
            triggerMode: TriggerMode::CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL,
            hwBufferAppendMode: AppendMode::CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST)
        .map_err(|problem| format!("{problem} (sm_86 or later?)"))?;
        let mut names = METRICS.map(CStr::as_ptr);
        let size = call!(cuptiPmSamplingGetCounterDataSize; pPmSamplingObject: self.sampling,
            pMetricNames: names.as_mut_ptr(), numMetrics: names.len(), maxSamples: SAMPLES_PER_DECODE)?;
        self.counter_data = vec![0; size.counterDataSize];
        self.reset_counter_data()?;
        self.started_ns = crate::clock::now_ns();
        call!(cuptiPmSamplingStart; pPmSamplingObject: self.sampling)?;
        self.running = true;
        Ok(())
    }

    /// Readies the counter data image for the next decode.
    fn reset_counter_data(&mut self) -> Result<(), String> {
        call!(cuptiPmSamplingCounterDataImageInitialize; pPmSamplingObject: self.sampling,
            counterDataSize: self.counter_data.len(), pCounterData: self.counter_data.as_mut_ptr())
        .map(drop)
    }

    /// Stops the device's sampler, if it runs.
    fn stop(&mut self) -> Result<(), String> {
        if !std::mem::replace(&mut self.running, false) {
            return Ok(());
        }
        call!(cuptiPmSamplingStop; pPmSamplingObject: self.sampling).map(drop)
    }

    /// [`Sampler::decode`], saying once why it failed and decoding no more.
    fn decode_or_tell(&mut self, samples: &mut Vec<PmSample>) {
        if let Err(problem) = self.decode(samples) {
            let ordinal = self.ordinal;
            eprintln!(
                "kscope profile: PM sampling of device {ordinal} failed ({problem}); later bytes are lost"
            );
            self.failed = true;
        }
    }

    /// Decodes into `samples` what the device recorded since the last
    /// decode: again while CUPTI says the image filled up.
    fn decode(&mut self, samples: &mut Vec<PmSample>) -> Result<(), String> {
        use sys::CUpti_PmSampling_DecodeStopReason as StopReason;
        for _ in 0..MOST_DECODES {
            let (decoded, decode) = call!(raw cuptiPmSamplingDecodeData;
                structSize: sys::PmSampling_DecodeData_Params_STRUCT_SIZE as usize,
                pPmSamplingObject: self.sampling, pCounterDataImage: self.counter_data.as_mut_ptr(),
                counterDataImageSize: self.counter_data.len());
            // KEEP_OLDEST reports a full hardware buffer by the flag or by this error.
            let overflowed = decode.overflow != 0 || decoded == sys::CUptiResult::CUPTI_ERROR_OUT_OF_MEMORY;
            if overflowed && !std::mem::replace(&mut self.overflow_told, true) {
                let ordinal = self.ordinal;
                eprintln!(
                    "kscope profile: PM sampling of device {ordinal} overflowed; some DRAM bytes are lost"
                );
            } else if !overflowed {
                check(decoded, "cuptiPmSamplingDecodeData")?;
            }
            // SAFETY: read as the integer C wrote, in case a newer CUPTI
            // writes a reason the enum lacks.
            let reason = unsafe { (&raw const decode.decodeStopReason).cast::<u32>().read() };
            self.read_samples(samples)?;
            self.reset_counter_data()?;
            if reason != StopReason::CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL as u32 {
                break;
            }
        }
        Ok(())
    }

    /// The completed samples of the counter data image, as [`frame`] keeps them.
    fn read_samples(&self, samples: &mut Vec<PmSample>) -> Result<(), String> {
        let (image, image_bytes) = (self.counter_data.as_ptr(), self.counter_data.len());
        let info = call!(cuptiPmSamplingGetCounterDataInfo;
            pCounterDataImage: image, counterDataImageSize: image_bytes)?;
        for index in 0..info.numCompletedSamples {
            let times = call!(cuptiPmSamplingCounterDataGetSampleInfo; pPmSamplingObject: self.sampling,
                pCounterDataImage: image, counterDataImageSize: image_bytes, sampleIndex: index)?;
            let (mut names, mut values) = (METRICS.map(CStr::as_ptr), [0f64; 2]);
            call!(cuptiProfilerHostEvaluateToGpuValues; pHostObject: self.host,
                pCounterDataImage: image, counterDataImageSize: image_bytes, rangeIndex: index,
                ppMetricNames: names.as_mut_ptr(), numMetrics: names.len(),
                pMetricValues: values.as_mut_ptr())?;
            let times = (times.startTimestamp, times.endTimestamp);
            samples.extend(frame(self.ordinal, self.started_ns, times, values));
        }
        Ok(())
    }
}

/// The frame of a sample of `device` over `start_ns..end_ns` with `values`
/// (bytes read, written); none for one begun before `started_ns` (the
/// first spans from the configuration) or that CUPTI made no sense of.
fn frame(device: u32, started_ns: u64, (start_ns, end_ns): (u64, u64), values: [f64; 2]) -> Option<PmSample> {
    let sensible = end_ns >= start_ns && values.iter().all(|value| value.is_finite());
    (start_ns >= started_ns && sensible).then(|| PmSample {
        start_ns,
        end_ns,
        dram_read_bytes: values[0].max(0.0).round() as u64,
        dram_write_bytes: values[1].max(0.0).round() as u64,
        device,
        padding: 0,
    })
}

impl Drop for Sampler {
    /// Stops, disables and deinitialises what was set up, in that order.
    fn drop(&mut self) {
        let _ = self.stop();
        if !self.sampling.is_null() {
            let sampling = std::mem::replace(&mut self.sampling, null_mut());
            let _ = call!(cuptiPmSamplingDisable; pPmSamplingObject: sampling);
        }
        if !self.host.is_null() {
            let host = std::mem::replace(&mut self.host, null_mut());
            let _ = call!(cuptiProfilerHostDeinitialize; pHostObject: host);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_from_the_start_that_make_sense_are_kept() {
        let kept = frame(1, 100, (100, 200), [1.4, -3.0]).expect("begun at the start");
        let fields = [
            kept.start_ns,
            kept.end_ns,
            kept.dram_read_bytes,
            kept.dram_write_bytes,
        ];
        assert_eq!(fields, [100, 200, 1, 0]);
        assert_eq!(frame(1, 100, (99, 200), [1.0; 2]), None, "begun before the start");
        assert_eq!(frame(1, 100, (300, 200), [1.0; 2]), None, "ended before it began");
        assert_eq!(frame(1, 100, (100, 200), [f64::NAN; 2]), None, "no number");
    }

    #[test]
    fn parameters_carry_their_headers_struct_size() {
        // SAFETY: CUPTI's function.
        let start = unsafe { parameters_of(sys::cuptiPmSamplingStart) };
        let header = sys::PmSampling_Start_Params_STRUCT_SIZE as usize;
        assert!(start.structSize == header && start.pPmSamplingObject.is_null());
        // The one whose header's size ends before its padding: its call says so.
        // SAFETY: CUPTI's function.
        let decode = unsafe { parameters_of(sys::cuptiPmSamplingDecodeData) }.structSize;
        let sizes = (decode, sys::PmSampling_DecodeData_Params_STRUCT_SIZE);
        assert_eq!(sizes, (48, 45));
    }
}
