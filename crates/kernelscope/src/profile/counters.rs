//! Always-on counters. Each is a relaxed atomic: counting costs an increment,
//! never a lock, so they stay on even with profiling off.
//!
//! They are bumped where work is issued (the command encoder, a buffer's
//! copies), so every backend counts alike: a dispatch when it is encoded
//! eagerly or replayed in a graph (capturing counts nothing), and a
//! concurrent one when no barrier separates it from the dispatch before; a
//! barrier (automatic or explicit) only when issued after at least one
//! dispatch; a submission per non-empty commit; a graph launch per replay; a
//! sync per host wait (an encoder's wait, a read back); a host-device copy
//! per copy into or out of a buffer.

use std::ops::{Add, Sub};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Live counters, owned by a device's profiler.
#[derive(Debug, Default)]
pub struct Counters {
    pub(crate) dispatches: AtomicU64,
    pub(crate) submissions: AtomicU64,
    pub(crate) syncs: AtomicU64,
    pub(crate) barriers: AtomicU64,
    pub(crate) auto_barriers: AtomicU64,
    pub(crate) concurrent: AtomicU64,
    pub(crate) graph_launches: AtomicU64,
    pub(crate) host_device_copies: AtomicU64,
}

/// A copy of the counters at one moment; differences of two snapshots give
/// the counts of what happened in between (one token, one run).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterSnapshot {
    /// Kernels executed (a graph replay counts each of its dispatches once).
    pub dispatches: u64,
    /// Command submissions committed to a queue or stream.
    pub submissions: u64,
    /// Host waits for the device.
    pub syncs: u64,
    /// Memory barriers really issued (explicit and automatic).
    pub barriers: u64,
    /// The subset of `barriers` that the MemRanges tracker placed.
    pub auto_barriers: u64,
    /// Dispatches the tracker found independent of the previous ones, which
    /// therefore needed no barrier and may overlap them.
    pub concurrent: u64,
    /// Graph replays.
    pub graph_launches: u64,
    /// Copies between host and device memory, either direction.
    pub host_device_copies: u64,
}

macro_rules! counter_names {
    ($($field:ident),*) => {
        impl CounterSnapshot {
            /// `(name, value)` for each counter, in a fixed order.
            pub fn entries(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($field), self.$field)),*]
            }
        }

        impl Counters {
            /// The current values.
            pub fn snapshot(&self) -> CounterSnapshot {
                CounterSnapshot { $($field: self.$field.load(Ordering::Relaxed)),* }
            }

            /// Sets every counter to zero.
            pub fn reset(&self) {
                $(self.$field.store(0, Ordering::Relaxed);)*
            }
        }

        impl CounterSnapshot {
            /// The counter-by-counter sum; `None` where a counter would pass
            /// `u64::MAX` (only a forged profile gets there: the profile
            /// loader refuses it by this test).
            pub fn checked_add(self, other: CounterSnapshot) -> Option<CounterSnapshot> {
                Some(CounterSnapshot { $($field: self.$field.checked_add(other.$field)?),* })
            }

            /// The counter-by-counter sum, each held at `u64::MAX` rather
            /// than wrapping around to a small, wrong count.
            pub fn saturating_add(self, other: CounterSnapshot) -> CounterSnapshot {
                CounterSnapshot { $($field: self.$field.saturating_add(other.$field)),* }
            }
        }

        /// Saturating, like [`CounterSnapshot::saturating_add`]: live counts
        /// never come near `u64::MAX`, and profiles whose sums would are
        /// refused when loaded.
        impl Add for CounterSnapshot {
            type Output = CounterSnapshot;

            fn add(self, other: CounterSnapshot) -> CounterSnapshot {
                self.saturating_add(other)
            }
        }

        impl Sub for CounterSnapshot {
            type Output = CounterSnapshot;

            fn sub(self, earlier: CounterSnapshot) -> CounterSnapshot {
                CounterSnapshot { $($field: self.$field.saturating_sub(earlier.$field)),* }
            }
        }
    };
}

counter_names!(
    dispatches,
    submissions,
    syncs,
    barriers,
    auto_barriers,
    concurrent,
    graph_launches,
    host_device_copies
);

impl Counters {
    #[inline]
    pub(crate) fn add(counter: &AtomicU64, amount: u64) {
        counter.fetch_add(amount, Ordering::Relaxed);
    }
}
