//! Placing GPU times on the profiler's host clock. Event times are read
//! relative to an epoch event whose host time was measured when the device
//! opened; CUPTI's timestamps by an offset measured then too. Both are
//! measured offsets, not ratios of clock rates.

use super::cupti::StreamKey;
use super::driver::{Event, driver_error};
use super::stream::DeviceStream;
use crate::error::Result;
use crate::profile::Profiler;

/// Where a device's CUPTI records come from and how their clock maps to
/// the profiler's: `host_ns = cupti_ns + offset_ns`.
pub(crate) struct CuptiClock {
    key: StreamKey,
    offset_ns: i128,
}

impl CuptiClock {
    /// The offset for the records of `key`, from the tightest of a few
    /// host/CUPTI/host brackets.
    pub(crate) fn calibrate(profiler: &Profiler, key: StreamKey) -> CuptiClock {
        let mut best = (u64::MAX, 0i128);
        for _ in 0..8 {
            let before = profiler.now_ns();
            let gpu = super::cupti::timestamp();
            let after = profiler.now_ns();
            if after - before < best.0 {
                best = (after - before, i128::from((before + after) / 2) - i128::from(gpu));
            }
        }
        CuptiClock {
            key,
            offset_ns: best.1,
        }
    }

    /// CUPTI's ids of the device's stream.
    pub(crate) fn key(&self) -> StreamKey {
        self.key
    }

    pub(crate) fn to_host(&self, cupti_ns: u64) -> u64 {
        (i128::from(cupti_ns) + self.offset_ns).max(0) as u64
    }
}

/// An event recorded once, and the host time (profiler clock) at which it
/// completed.
pub(crate) struct Epoch {
    event: Event,
    host_ns: u64,
}

impl Epoch {
    /// Records the epoch on `stream` (context bound) and measures its host
    /// time: the midpoint of a host bracket around the wait for it, the
    /// tightest of a few tries (the event re-recorded each time).
    pub(crate) fn measure(stream: &DeviceStream, profiler: &Profiler) -> Result<Epoch> {
        let event = Event::new(stream.context())?;
        event.record(stream.stream())?;
        let mut host_ns = 0;
        let mut tightest = u64::MAX;
        for _ in 0..4 {
            event.record(stream.stream())?;
            let before = profiler.now_ns();
            stream.synchronize()?;
            let after = profiler.now_ns();
            if after - before < tightest {
                tightest = after - before;
                host_ns = before + (after - before) / 2;
            }
        }
        Ok(Epoch { event, host_ns })
    }

    /// Host ns (profiler clock) at which `event` completed.
    pub(crate) fn host_ns(&self, event: &Event) -> Result<u64> {
        let ms = self
            .event
            .elapsed_ms(event)
            .map_err(driver_error("reading an event time"))?;
        Ok(self.host_ns + (f64::from(ms) * 1e6) as u64)
    }
}
