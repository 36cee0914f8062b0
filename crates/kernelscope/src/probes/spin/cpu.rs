//! CPU reference of the calibration spin: a "cycle" is a nanosecond of the
//! host's monotonic clock, and the "global timer" counts nanoseconds from
//! the first spin of the process.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::runtime::KernelArgs;

use super::{CYCLES, RECORD};

/// Busy-waits `cycles` ns and records when it began and ended and the ns
/// that passed, as u32 pairs, low word first.
pub(super) fn spin(args: &KernelArgs<'_>) -> Result<()> {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    let cycles = args.u64(CYCLES)?;
    let record = args.output::<u32>(RECORD)?;
    let began = Instant::now();
    let wanted = Duration::from_nanos(cycles);
    while began.elapsed() < wanted {
        std::hint::spin_loop();
    }
    let ended = Instant::now();
    let since_epoch = |instant: Instant| instant.duration_since(epoch).as_nanos() as u64;
    let spun = ended.duration_since(began).as_nanos() as u64;
    for (pair, value) in record
        .chunks_exact_mut(2)
        .zip([since_epoch(began), since_epoch(ended), spun])
    {
        pair[0] = value as u32;
        pair[1] = (value >> 32) as u32;
    }
    Ok(())
}
