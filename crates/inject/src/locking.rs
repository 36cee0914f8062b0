//! Locks that outlive a panic. A panic is caught at every entry point (none
//! may cross the C boundary into the program), and each update under the
//! library's locks leaves its data whole, so a poisoned lock is taken as it
//! is and the program goes on profiled. A signal handler only tries a lock:
//! the thread that crashed may hold it.
//!
//! A foundation: uses no other module of the library.

use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

/// `mutex`'s guard, poisoned or not.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `mutex`'s guard, poisoned or not, unless another thread holds it.
pub(crate) fn try_lock<T>(mutex: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match mutex.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}
