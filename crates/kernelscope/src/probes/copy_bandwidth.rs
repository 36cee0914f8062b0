//! The copy probe: a device's copy bandwidth, measured with the Copy op
//! itself, bytes read plus bytes written.

use crate::error::Result;
use crate::ops::copy::Copy;
use crate::runtime::Device;

/// Measures `device`'s copy bandwidth in GB/s as the best of `repetitions`
/// timed copies of `bytes` bytes, counting bytes read plus bytes written,
/// timed as every ceiling probe is (see `probes::timing`: by the device
/// where its profiler times submissions, else by the host around commit
/// and wait, which adds the launch: pick `bytes` large then).
pub fn measure_bandwidth(device: &Device, bytes: usize, repetitions: usize) -> Result<f64> {
    let registry = crate::ops::registry();
    let copy = Copy::new(&registry, device)?;
    let words = bytes.div_ceil(4).max(1);
    // Any distinct words do; the index is cut to 32 bits on purpose.
    let pattern: Vec<u32> = (0..words)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761))
        .collect();
    let source = device.buffer_from_slice(&pattern, &[words])?;
    let destination = device.alloc(crate::DType::U32, &[words])?;
    let best = super::timing::best_seconds(device, "bandwidth", repetitions, |encoder| {
        copy.encode(encoder, &source, &destination)
    })?;
    Ok(2.0 * (words * 4) as f64 / best / 1e9)
}
