//! Helpers for tests written once against `&Device` and run on every
//! backend. A CUDA variant that finds no GPU says so loudly and passes,
//! except when `KSCOPE_REQUIRE_GPU=1`, where it fails: a GPU test run can
//! never pass by skipping.

use crate::rng::SplitMix64;
use crate::{Device, DeviceOptions};

/// Set to `1` to make CUDA tests fail instead of skipping without a GPU.
pub const REQUIRE_GPU_ENV_VAR: &str = "KSCOPE_REQUIRE_GPU";

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
                    if std::env::var(REQUIRE_GPU_ENV_VAR).is_ok_and(|value| value == "1") {
                        panic!("{REQUIRE_GPU_ENV_VAR}=1 but no CUDA device: {error}");
                    }
                    eprintln!(
                        "SKIPPED (no CUDA device; set {REQUIRE_GPU_ENV_VAR}=1 to fail instead): {error}"
                    );
                    None
                }
            },
        }
    }
}

/// Expands `name(backend: Backend)` test bodies into a module per test with
/// `cpu` and `cuda` test functions.
///
/// ```ignore
/// fn doubles(backend: Backend) { let Some(device) = backend.device(DeviceOptions::new()) else { return }; ... }
/// kernelscope::device_tests!(doubles);   // tests `doubles::cpu` and `doubles::cuda`
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
