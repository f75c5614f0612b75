//! Counting what this process holds (its fds, mappings, or `/dev/shm`
//! segments) while other tests of the same binary run would count theirs
//! too: the tests that count hold [`counting`] for as long as they count,
//! and every other test of such a binary holds [`making`], since each
//! opens fds, maps memory, makes segments or spawns children whose pipes
//! pass through this process.

use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

static PROCESS_COUNTS: RwLock<()> = RwLock::new(());

/// Runs the caller alone among the tests holding [`making`].
pub fn counting() -> RwLockWriteGuard<'static, ()> {
    PROCESS_COUNTS
        .write()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Keeps the caller from running while a test holds [`counting`].
pub fn making() -> RwLockReadGuard<'static, ()> {
    PROCESS_COUNTS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
}
