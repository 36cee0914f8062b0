//! A device's physical limits, from what the device says about itself
//! (memory clock and bus width, SM count and clock): the figures datasheets
//! quote, which no kernel reaches, shown beside the measured ceilings so a
//! reader sees both how far kscope's kernels are from what the machine can
//! do and how far that is from what it was sold as.

/// The physical limits a device reports, each with how it was derived.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PhysicalLimits {
    /// Memory bandwidth in GB/s: memory clock × 2 (double data rate) × bus
    /// width, and the derivation.
    pub memory_bandwidth: Option<(f64, String)>,
    /// Dense bf16 (fp16 before bf16 existed) tensor-core rate in GFLOP/s:
    /// SM count × SM clock × the architecture's flops per SM per clock,
    /// and the derivation; absent for an architecture without a known rate.
    pub tensor_compute: Option<(f64, String)>,
}

/// Memory bandwidth in GB/s from the memory clock (kHz, as the driver
/// reports it) and the bus width (bits): two transfers a clock.
pub fn memory_bandwidth_gbps(memory_clock_khz: u64, bus_width_bits: u64) -> f64 {
    memory_clock_khz as f64 * 1e3 * 2.0 * (bus_width_bits as f64 / 8.0) / 1e9
}

/// Dense tensor-core flops per SM per clock at 16-bit inputs with f32
/// accumulation, by compute capability: the vendor's peak figures divided
/// by SM count and boost clock (V100 125 TFLOP/s fp16 on 80 SMs at 1.53
/// GHz: 1024; A100 312 on 108 at 1.41: 2048; A10/L4/L40S: 1024; H100 989
/// on 132 at 1.83: 4096; B200: 8192). `None` for any other architecture.
pub fn tensor_flops_per_sm_per_clock(major: i32, minor: i32) -> Option<u64> {
    match (major, minor) {
        (7, 0) | (7, 2) | (7, 5) => Some(1024),
        (8, 0) => Some(2048),
        (8, 6) | (8, 7) | (8, 9) => Some(1024),
        (9, 0) => Some(4096),
        (10, 0) => Some(8192),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    #[test]
    fn bandwidth_is_two_transfers_per_clock_over_the_whole_bus() {
        // An H100 SXM reports 2,619 MHz over 5,120 bits: 3,352 GB/s.
        assert!((memory_bandwidth_gbps(2_619_000, 5_120) - 3_352.32).abs() < 0.01);
        let mut rng = SplitMix64::new(0x1111_2222);
        for _ in 0..100 {
            let clock = 100_000 + (rng.next_u64() % 4_000_000);
            let width = 64 * (1 + rng.next_u64() % 128);
            // Doubling either doubles the bandwidth.
            let base = memory_bandwidth_gbps(clock, width);
            assert!((memory_bandwidth_gbps(2 * clock, width) - 2.0 * base).abs() < 1e-6 * base);
            assert!((memory_bandwidth_gbps(clock, 2 * width) - 2.0 * base).abs() < 1e-6 * base);
        }
    }

    #[test]
    fn tensor_rates_reproduce_the_datasheets() {
        // H100 SXM: 132 SMs at 1,830 MHz is 989 dense bf16 TFLOP/s.
        let h100 = 132.0 * 1.83e9 * tensor_flops_per_sm_per_clock(9, 0).unwrap() as f64 / 1e12;
        assert!((h100 - 989.0).abs() < 1.0, "{h100}");
        // A100: 108 SMs at 1,410 MHz is 312.
        let a100 = 108.0 * 1.41e9 * tensor_flops_per_sm_per_clock(8, 0).unwrap() as f64 / 1e12;
        assert!((a100 - 312.0).abs() < 1.0, "{a100}");
        assert_eq!(tensor_flops_per_sm_per_clock(6, 1), None);
    }
}
