//! The argument list of spin's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! { CYCLES: "cycles" U64, RECORD: "record" Write }

/// Spins timed at each target duration.
pub(super) const REPETITIONS: usize = 15;

/// The durations calibrated, in µs.
pub const TARGETS_US: [f64; 7] = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0];

/// How long the spins that measure the clock rate last, in ns.
pub(super) const CLOCK_SPIN_NS: f64 = 20e6;
