//! How every ceiling probe (copy, read, write, GEMM) times its runs: one
//! untimed warm-up submission (first touch, plans, clocks ramping up), then
//! the best of several timed submissions, each timed by the device itself
//! where its profiler times submissions (CUDA events around the work: a
//! 60 µs read of 256 MiB on an H200 would lose a tenth of its rate to the
//! launch and the wait in host time), else by the host's wall clock around
//! commit and wait. The best rather than the median: noise on a quiet
//! machine only ever slows a run down.

use crate::error::Result;
use crate::runtime::{CommandEncoder, Device};

/// The shortest time in seconds of `repetitions` (at least one) timed
/// submissions labeled `label`, each encoded by `encode`, after one
/// untimed warm-up labeled `label.warmup`. A run too short for the clock
/// counts as one nanosecond, so a rate divided by it stays finite.
pub(crate) fn best_seconds(
    device: &Device,
    label: &str,
    repetitions: usize,
    mut encode: impl FnMut(&mut CommandEncoder) -> Result<()>,
) -> Result<f64> {
    let mut encoder = device.command_encoder();
    encode(&mut encoder)?;
    encoder.commit_and_wait_labeled(&format!("{label}.warmup"))?;
    let profiler = device.profiler();
    let device_timed = profiler.times_submissions();
    let mut best_seconds = f64::INFINITY;
    for _ in 0..repetitions.max(1) {
        let recorded_before = if device_timed {
            profiler.submissions().len()
        } else {
            0
        };
        let start = std::time::Instant::now();
        encode(&mut encoder)?;
        encoder.commit_and_wait_labeled(label)?;
        let host_seconds = start.elapsed().as_secs_f64();
        let seconds = if device_timed {
            // The submission just waited for is the last one of this label
            // recorded since; the host time stands in should the profiler
            // have been reset meanwhile by another user of the device.
            profiler
                .submissions()
                .iter()
                .skip(recorded_before)
                .rfind(|submission| &*submission.label == label)
                .map_or(host_seconds, |submission| submission.duration_ns() as f64 / 1e9)
        } else {
            host_seconds
        };
        best_seconds = best_seconds.min(seconds);
    }
    Ok(best_seconds.max(1e-9))
}
