//! Locks that outlive a panicking holder, and queues whose entries fall
//! due on a thread of their own.

pub(crate) mod expiry;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// `mutex` locked, whether or not a holder panicked: every state the crate
/// keeps behind one is whole at each point its lock is let go.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
