//! Locking that survives a poisoned mutex. Every mutex in this crate guards
//! plain data (tables, pools, queues) that a panicking holder cannot leave
//! half-updated in a way later readers would misread, so the data is used
//! as it is rather than turning one panic into a cascade.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, recovering the guard when a previous holder panicked.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
