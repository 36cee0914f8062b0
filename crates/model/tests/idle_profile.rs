//! A profiled run's first profile tells the truth about idle time and does
//! not cry wolf: for each small preset, a fresh device in its fastest mode
//! (graphs on CUDA), a prompt and a few decoded tokens, then every
//! submission's idle account adds up to its span and the cross-check finds
//! the two clocks in agreement.

use kernelscope::profile::{ProfileLevel, cross_check};
use kernelscope::testing::Backend;
use kernelscope::{DType, DeviceOptions};
use kernelscope_model::{GenerationRequest, Model, SyntheticOptions};

fn first_profiles_flag_nothing(backend: Backend) {
    for name in ["tiny", "tiny-qwen3", "tiny-qwen3-moe"] {
        let Some(device) = backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch)) else {
            return;
        };
        let options = SyntheticOptions {
            dtype: DType::BF16,
            seed: 5,
            quiet: true,
        };
        let mut model = Model::from_preset(name, &device, options).unwrap();
        let prompt: Vec<u32> = (0..9).map(|i| (i * 131 + 7) % 1000).collect();
        model
            .generate(&GenerationRequest {
                stop_at_eos: false,
                ..GenerationRequest::new(&prompt, 12)
            })
            .unwrap();
        let mode = model.execution_mode().name();
        let profile = model.profile(device.conditions(mode, None));
        assert!(!profile.dispatches.is_empty(), "{name}: dispatches were timed");
        for submission in &profile.submissions {
            let idle = submission.idle.unwrap_or_else(|| {
                panic!("{name}: submission {} has no idle account", submission.submission)
            });
            assert_eq!(idle.span_ns(), submission.duration_ns(), "{name}: {submission:?}");
            assert!(idle.busy_ns > 0, "{name}: {submission:?}");
        }
        let checks = cross_check(&profile);
        assert!(
            checks.iter().any(|check| check.label == "decode"),
            "{name} ({mode}): {checks:?}"
        );
        for check in &checks {
            assert!(!check.flagged, "{name} ({mode}): {check:?}");
        }
    }
}

kernelscope::device_tests!(first_profiles_flag_nothing);
