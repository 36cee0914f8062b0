//! What a bench measured (a row per test) and the ceilings its rates are
//! read against: a file of their own, so that the JSON printer reads them
//! without importing the command that calls it.

use kernelscope::Device;
use kernelscope::probes::ceilings::Measured;
use kernelscope::profile::{Phase, Spread};
use kernelscope_model::Model;

/// One test's result.
pub(super) struct Row {
    /// Its name in llama-bench's manner: `pp128`, `tg128 @ d512`.
    pub(super) test: String,
    /// Tokens per repetition.
    pub(super) count: usize,
    pub(super) phase: Phase,
    /// Tokens per second over the repetitions.
    pub(super) spread: Spread,
    /// Each repetition's tokens per second.
    pub(super) rates: Vec<f64>,
    /// The same test's tokens per second unprofiled, measured just before
    /// in the same process, where the bench ran profiled.
    pub(super) unprofiled: Option<Spread>,
}

impl Row {
    /// What profiling cost: 1 - profiled / unprofiled rate, where both ran.
    pub(super) fn profiling_cost(&self) -> Option<f64> {
        let unprofiled = self.unprofiled.as_ref()?;
        (unprofiled.mean > 0.0).then(|| 1.0 - self.spread.mean / unprofiled.mean)
    }
}

/// The ceilings the rates are read against.
pub(super) struct Ceilings {
    /// Everything measured of rank 0's device.
    pub(super) measured: Measured,
    /// Weight bytes every decoded token reads.
    pub(super) bytes_per_token: u64,
    /// Memories the weights are read from at once: one per GPU rank, one
    /// for all CPU ranks (they share the host's).
    pub(super) memories: usize,
    /// Decode tokens/s if every token only read its weights at the
    /// measured read ceiling.
    pub(super) roofline: Option<f64>,
}

impl Ceilings {
    pub(super) fn of(device: &Device, model: &Model, measured: Measured) -> Ceilings {
        let bytes_per_token = model.weight_bytes_per_token();
        // GPU ranks each read their share of the weights from their own memory
        // at once; CPU ranks share the host's. Where ranks are processes the
        // bytes are this process's shard's, read by its one device.
        let memories = if device.backend() == "cpu" {
            1
        } else {
            model.devices().len()
        };
        let roofline = measured
            .ceilings
            .read
            .as_ref()
            .map(|read| read.value * 1e9 * memories as f64 / bytes_per_token as f64);
        Ceilings {
            measured,
            bytes_per_token,
            memories,
            roofline,
        }
    }
}
