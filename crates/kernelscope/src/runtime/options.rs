//! How a device is set up: options fixed when it is created, the only place
//! the environment is read (once, by [`DeviceOptions::from_env`]).

use crate::error::Result;
use crate::profile::{ProfileLevel, TokenSelection};

/// How a device is set up. Fixed at creation.
#[derive(Clone, Debug, Default)]
pub struct DeviceOptions {
    pub(crate) profile: ProfileLevel,
    pub(crate) dispatch_timing_unsupported: Option<String>,
    pub(crate) serial_launch: bool,
    pub(crate) persistent_steps: bool,
    pub(crate) token_selection: TokenSelection,
    pub(crate) check_finite: bool,
}

impl DeviceOptions {
    /// Profiling off, every capability the backend has.
    pub fn new() -> Self {
        Self::default()
    }

    /// Options from the environment: `KSCOPE_PROFILE=off|submission|dispatch`.
    /// Read here, once; pass the result to the device.
    pub fn from_env() -> Result<Self> {
        Ok(Self::new().profile(ProfileLevel::from_env()?))
    }

    /// Sets the profiling level.
    pub fn profile(mut self, level: ProfileLevel) -> Self {
        self.profile = level;
        self
    }

    /// Times only the tokens `selection` names (`--profile-tokens`): the
    /// others, and work outside tokens, run as with profiling off, their
    /// counters still exact. On CUDA, CUPTI's kernel records are switched
    /// on for the selected tokens only, so the tokens between pay nothing
    /// for them. Every token by default.
    pub fn profile_tokens(mut self, selection: TokenSelection) -> Self {
        self.token_selection = selection;
        self
    }

    /// After every dispatch, checks each float buffer it wrote for NaN or
    /// +infinity and stops at the first, naming the kernel, its scope (the
    /// layer and step) and the argument (`run --check-finite`): where a
    /// model's numbers first stop being numbers. The CPU's queue only;
    /// it reads every output, so it is for finding a fault, not for speed.
    pub fn check_finite(mut self, check: bool) -> Self {
        self.check_finite = check;
        self
    }

    /// Whether outputs are checked for non-finite values.
    pub fn checks_finite(&self) -> bool {
        self.check_finite
    }

    /// The tokens profiled.
    pub fn token_selection(&self) -> TokenSelection {
        self.token_selection
    }

    /// The profiling level.
    pub fn profile_level(&self) -> ProfileLevel {
        self.profile
    }

    /// Makes the device behave as a backend that cannot time individual
    /// dispatches (giving `reason`), as some GPUs cannot: per-submission
    /// timing goes on and reports say "unsupported". For testing the degrade
    /// path and for measuring without per-dispatch overhead.
    pub fn without_dispatch_timing(mut self, reason: &str) -> Self {
        self.dispatch_timing_unsupported = Some(reason.to_string());
        self
    }

    /// Makes CUDA graphs launch every kernel only once the previous one has
    /// finished. By default a graph launches each kernel that begins by
    /// waiting for its predecessor early, while that predecessor finishes
    /// (programmatic dependent launch; GPUs of compute capability 9.0 and
    /// later), hiding the launch and block start-up under its tail: on an
    /// H100 that made llama-3.2-1b, llama-3-8b, qwen3-8b and qwen3-30b-a3b
    /// decode 0.6 to 2.4 % faster (docs/PERF.md). For measuring what early
    /// launch gives, and as a workaround should it misbehave on a driver.
    pub fn serial_launch(mut self) -> Self {
        self.serial_launch = true;
        self
    }

    /// Runs several of decode's steps in one persistent launch where an op
    /// has such a kernel (a quantized layer's feed-forward half: norm,
    /// gate/up, quantize and down; CUDA). Off by default: on an H200 it
    /// decoded llama-3.2-1b Q4_K_M 1.5 % slower than the four kernels it
    /// replaces (docs/PERF.md), so it is for measuring and developing it.
    pub fn persistent_steps(mut self) -> Self {
        self.persistent_steps = true;
        self
    }
}
