//! Fixtures for tests and examples, behind the `testing` cargo feature (off
//! by default, so none of this is part of the library's API): tests written
//! once against `&Device` and run on every backend, seeded random data, a
//! synthetic profile (and one of a kernel timed inside by its phases,
//! `in_kernel`) and the smallest real kernel. A CUDA variant that finds
//! no GPU says so loudly and passes, except when `KSCOPE_REQUIRE_GPU=1`,
//! where it fails: a GPU test run can never pass by skipping.

use crate::profile::{Ceiling, Ceilings};
use crate::rng::SplitMix64;
use crate::{Device, DeviceOptions};

/// A TCP port of localhost free at the moment (the listener that found it
/// is dropped before it returns), where test ranks meet.
pub fn free_local_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("localhost takes a listener")
}

/// Set to `1` to make CUDA tests fail instead of skipping without a GPU;
/// `2` (or more) also makes tests that need that many GPUs fail with fewer.
pub const REQUIRE_GPU_ENV_VAR: &str = "KSCOPE_REQUIRE_GPU";

/// How many GPUs the environment requires ([`REQUIRE_GPU_ENV_VAR`]; 0 when unset).
pub fn required_gpus() -> usize {
    std::env::var(REQUIRE_GPU_ENV_VAR)
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

/// Prints a skip straight to stderr, so the harness's capture cannot hide it;
/// `gpus` is how many GPUs the test needs, the value that makes it fail instead.
fn say_skipped(why: &str, gpus: usize) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {} ({why}; set {REQUIRE_GPU_ENV_VAR}={gpus} to fail instead)",
        std::thread::current().name().unwrap_or("test")
    );
}

/// The backend a generated test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The CPU backend.
    Cpu,
    /// The CUDA backend (GPU 0).
    Cuda,
}

impl Backend {
    /// Opens the backend's device with `options`. `None` means the test must
    /// return now: the CUDA device is unavailable and a GPU is not required
    /// (the skip is printed). Panics when a GPU is required but unavailable.
    pub fn device(self, options: DeviceOptions) -> Option<Device> {
        match self {
            Backend::Cpu => Some(Device::cpu_with(options)),
            Backend::Cuda => match Device::cuda_with(0, options) {
                Ok(device) => Some(device),
                Err(error) => {
                    if required_gpus() >= 1 {
                        panic!("{REQUIRE_GPU_ENV_VAR} is set but no CUDA device: {error}");
                    }
                    say_skipped(&format!("no CUDA device: {error}"), 1);
                    None
                }
            },
        }
    }

    /// `count` devices of the backend with `options`: separate CPU devices,
    /// or GPUs 0..count. `None` means the test must return now: fewer GPUs
    /// than `count` and [`REQUIRE_GPU_ENV_VAR`] below `count` (the skip is
    /// printed). Panics when that many GPUs are required but missing.
    pub fn devices(self, count: usize, options: DeviceOptions) -> Option<Vec<Device>> {
        match self {
            Backend::Cpu => Some((0..count).map(|_| Device::cpu_with(options.clone())).collect()),
            Backend::Cuda => {
                let found = Device::cuda_device_count();
                let available = *found.as_ref().unwrap_or(&0);
                if available < count {
                    let why = match found {
                        Ok(found) => format!("{found} GPU(s), the test needs {count}"),
                        Err(error) => format!("no CUDA device, the test needs {count}: {error}"),
                    };
                    if required_gpus() >= count {
                        panic!("{REQUIRE_GPU_ENV_VAR}={} but {why}", required_gpus());
                    }
                    say_skipped(&why, count);
                    return None;
                }
                let devices = (0..count)
                    .map(|ordinal| Device::cuda_with(ordinal, options.clone()))
                    .collect::<crate::Result<Vec<_>>>()
                    .unwrap_or_else(|error| panic!("opening {count} GPUs: {error}"));
                Some(devices)
            }
        }
    }
}

/// Expands `name(backend: Backend)` test bodies into a module per test with
/// `cpu` and `cuda` test functions.
///
/// ```
/// use kernelscope::testing::Backend;
/// use kernelscope::{DType, DeviceOptions};
///
/// fn allocates_zeros(backend: Backend) {
///     let Some(device) = backend.device(DeviceOptions::new()) else { return };
///     let buffer = device.alloc(DType::F32, &[3]).unwrap();
///     assert_eq!(buffer.to_vec::<f32>().unwrap(), vec![0.0; 3]);
/// }
///
/// // Tests `allocates_zeros::cpu` and `allocates_zeros::cuda`.
/// kernelscope::device_tests!(allocates_zeros);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! device_tests {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn cpu() {
                super::$name($crate::testing::Backend::Cpu)
            }

            #[test]
            fn cuda() {
                super::$name($crate::testing::Backend::Cuda)
            }
        }
    )*};
}

/// `count` random values in `[-1, 1)`, never all zeros, from `seed`.
pub fn random_f32(seed: u64, count: usize) -> Vec<f32> {
    SplitMix64::new(seed).vec_f32(count, -1.0, 1.0)
}

/// A made-up but realistic profile for tests of reports and comparisons:
/// `tokens` decode tokens over two layers, each running a MatVec (100 µs), an
/// Attention (40 µs) and an RmsNorm (5 µs) dispatch in one labeled
/// submission, with ±2% seeded jitter, every duration multiplied by
/// `slowdown` (1.2 = 20% slower).
pub fn synthetic_profile(tokens: u32, slowdown: f64, seed: u64) -> crate::profile::Profile {
    synthetic_layered_profile(tokens, 2, &|_| slowdown, seed)
}

/// A dispatch-level profile of a synthetic CPU run with no records yet.
fn empty_synthetic_profile() -> crate::profile::Profile {
    use crate::profile::{
        Conditions, CounterSnapshot, DispatchTiming, Profile, ProfileLevel, TimingMechanism, TimingMethod,
    };

    Profile {
        schema: crate::profile::PROFILE_SCHEMA_VERSION,
        tool: "synthetic".into(),
        conditions: Conditions {
            device: "cpu: synthetic".into(),
            backend: "cpu".into(),
            driver: None,
            mode: "eager".into(),
            profiling: ProfileLevel::Dispatch,
            submission_timing: TimingMethod::current(TimingMechanism::HostClock),
            dispatch_timing: DispatchTiming::supported(TimingMechanism::HostClock),
            model: Some("synthetic".into()),
            weight_format: None,
            model_shape: None,
            ceilings: Ceilings {
                read: Some(Ceiling::new(100.0, "synthetic read")),
                write: Some(Ceiling::new(80.0, "synthetic write")),
                copy: Some(Ceiling::new(90.0, "synthetic copy")),
                compute: Some(Ceiling::new(5000.0, "synthetic compute")),
                ..Ceilings::default()
            },
            topology: None,
            early_launch: false,
            cpu_kernels: None,
            profiled_tokens: None,
            bytes_measured: None,
            program: None,
            anatomy: None,
        },
        counters: CounterSnapshot::default(),
        tokens: Vec::new(),
        submissions: Vec::new(),
        dispatches: Vec::new(),
        warnings: Vec::new(),
        ranks: Vec::new(),
        experts: None,
    }
}

/// [`synthetic_profile`] with `layers` layers, each layer's durations
/// multiplied by `slowdown(layer)` (one slow layer, or a slower run).
pub fn synthetic_layered_profile(
    tokens: u32,
    layers: usize,
    slowdown: &dyn Fn(usize) -> f64,
    seed: u64,
) -> crate::profile::Profile {
    use std::sync::Arc;

    use crate::OpKind;
    use crate::profile::{CounterSnapshot, DispatchRecord};

    let mut rng = SplitMix64::new(seed);
    let label: Arc<str> = Arc::from("decode");
    let dispatches = 3 * layers as u64;
    let per_token = CounterSnapshot {
        dispatches,
        submissions: 1,
        syncs: 1,
        barriers: dispatches.saturating_sub(1),
        ..Default::default()
    };
    let mut profile = empty_synthetic_profile();
    let mut now = 1_000u64;
    for token in 0..tokens {
        let token_start = now;
        let mut index = 0;
        for layer in 0..layers {
            for (kernel, format, kind, micros) in [
                ("matvec_bf16", "bf16", OpKind::MatVec, 100.0),
                ("attention_f32", "f32", OpKind::Attention, 40.0),
                ("rms_norm_f32", "f32", OpKind::RmsNorm, 5.0),
            ] {
                let jitter = 1.0 + rng.uniform(-0.02, 0.02) as f64;
                let duration = (micros * 1e3 * slowdown(layer) * jitter) as u64;
                profile.dispatches.push(DispatchRecord {
                    label: label.clone(),
                    submission: u64::from(token),
                    index,
                    kernel: Arc::from(kernel),
                    format: Some(Arc::from(format)),
                    op_kind: kind,
                    scope: Arc::from(format!(
                        "layer.{layer}.{}",
                        if kind == OpKind::MatVec { "mlp" } else { "attn" }
                    )),
                    stream: 0,
                    token: Some(token),
                    start_ns: now,
                    end_ns: now + duration,
                    bytes: 1 << 20,
                    // A mat-vec writes a sliver of what it reads.
                    bytes_written: 1 << 12,
                    flops: 1 << 19,
                    roles: Default::default(),
                    measured_bytes: 0,
                    in_kernel: None,
                });
                index += 1;
                now += duration + 500;
            }
        }
        now = close_synthetic_token(&mut profile, &label, token, token_start, now, index, per_token);
    }
    profile.with_idle()
}

/// Closes decode token `token` of a synthetic profile: one submission of
/// `dispatches` dispatches from `start_ns` to `end_ns`, the token ending 2
/// µs later, its counters added to the profile's. Returns the token's end.
pub(crate) fn close_synthetic_token(
    profile: &mut crate::profile::Profile,
    label: &std::sync::Arc<str>,
    token: u32,
    start_ns: u64,
    end_ns: u64,
    dispatches: u32,
    counters: crate::profile::CounterSnapshot,
) -> u64 {
    use crate::profile::{Phase, SubmissionRecord, TokenRecord};
    profile.submissions.push(SubmissionRecord {
        label: label.clone(),
        submission: u64::from(token),
        stream: 0,
        token: Some(token),
        start_ns,
        end_ns,
        dispatches,
        enqueue: None,
        idle: None,
    });
    let token_end = end_ns + 2_000;
    profile.tokens.push(TokenRecord {
        index: token,
        phase: Phase::Decode,
        start_ns,
        end_ns: token_end,
        counters,
        timed: true,
    });
    profile.counters = profile.counters + counters;
    token_end
}

/// The `inc_one` kernel (`out[i] = in[i] + 1` over `n` f32s, parameters
/// `in, out, n`) for the CPU and CUDA backends: the smallest real kernel, for
/// tests and examples that measure the machinery around it.
pub fn inc_one_registry() -> crate::KernelRegistry {
    let mut registry = crate::KernelRegistry::new();
    registry.register_cpu("inc_one", |args| {
        let input = args.input::<f32>(0)?;
        let output = args.output::<f32>(1)?;
        for (o, i) in output.iter_mut().zip(input) {
            *o = i + 1.0;
        }
        Ok(())
    });
    registry.register_cuda_source(
        "inc_one",
        r#"extern "C" __global__ void inc_one(const float* in, float* out, unsigned int n) {
            unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) out[i] = in[i] + 1.0f;
        }"#,
    );
    registry
}

pub mod in_kernel;
#[cfg(feature = "cuda")]
pub mod nvrtc;
pub mod program_records;
pub mod quant_sweep;
