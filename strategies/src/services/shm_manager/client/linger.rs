//! Connections to other processes' managers, kept open a moment after the
//! last segment registered through them is let go.
//!
//! A receiver that drops each tensor before the next arrives would
//! otherwise close its connection to the sender's manager per tensor, and
//! open it again for the next: a connect, an accept in the manager, and the
//! first registration's round trip, every time. Kept for [`LINGER`] after
//! their last use, the connections of a steady stream stay open, and one
//! that falls idle still closes, so that a long-running process does not
//! keep every peer's manager alive (torch keeps them all until it exits).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use super::ManagerConnection;

/// How long a connection nothing else holds is kept open.
pub(super) const LINGER: Duration = Duration::from_secs(1);

/// The most connections kept open for nothing; past it, the one idle the
/// longest is let go first. Each costs an fd and keeps a manager alive.
const MAX_LINGERING: usize = 8;

/// Connections held for [`LINGER`] after their last use, and whether a
/// thread is there to let them go.
static LINGERING: Mutex<Lingering> = Mutex::new(Lingering {
    kept: Vec::new(),
    sweeping_in: None,
});

struct Lingering {
    kept: Vec<Kept>,
    /// The process whose thread lets the connections go: a child forked
    /// from it has a copy of the list and no such thread.
    sweeping_in: Option<u32>,
}

struct Kept {
    connection: Arc<ManagerConnection>,
    /// Since when only this list held it, as last seen.
    idle_since: Option<Instant>,
}

/// Keeps `connection` open for at least [`LINGER`] after everyone else has
/// let it go. Without a thread to close it later (the spawn failed), it is
/// not kept: closing early costs time, never correctness.
pub(super) fn keep(connection: &Arc<ManagerConnection>) {
    // Never waits: a child forked while another thread held the lock would
    // wait forever.
    let mut lingering = match LINGERING.try_lock() {
        Ok(lingering) => lingering,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return,
    };
    if let Some(kept) = lingering
        .kept
        .iter_mut()
        .find(|kept| Arc::ptr_eq(&kept.connection, connection))
    {
        kept.idle_since = None;
        return;
    }
    let this_process = std::process::id();
    if lingering.sweeping_in != Some(this_process) {
        // What a forked child inherited is its parent's to let go: dropped
        // here, each would shut down the socket the two share.
        std::mem::forget(std::mem::take(&mut lingering.kept));
        let spawned = std::thread::Builder::new()
            .name("tensorshare-shm-linger".into())
            .spawn(sweep_loop);
        if spawned.is_err() {
            return;
        }
        lingering.sweeping_in = Some(this_process);
    }
    if lingering.kept.len() >= MAX_LINGERING {
        let oldest = (0..lingering.kept.len()).min_by_key(|&i| {
            let kept = &lingering.kept[i];
            // Ones still in use sort last; among idle ones, the oldest.
            (kept.idle_since.is_none(), kept.idle_since)
        });
        if let Some(oldest) = oldest {
            lingering.kept.swap_remove(oldest);
        }
    }
    lingering.kept.push(Kept {
        connection: Arc::clone(connection),
        idle_since: None,
    });
}

/// Lets go, every half [`LINGER`], of the connections idle that long; ends
/// when none is left.
fn sweep_loop() {
    loop {
        std::thread::sleep(LINGER / 2);
        let mut lingering = lock();
        let released = release_idle(&mut lingering.kept, Instant::now());
        let done = lingering.kept.is_empty();
        if done {
            lingering.sweeping_in = None;
        }
        drop(lingering);
        // Closed outside the lock: closing shuts a socket down.
        drop(released);
        if done {
            return;
        }
    }
}

/// Takes out of `kept` the connections nothing else has held for
/// [`LINGER`], noting when the others were first seen idle.
fn release_idle(kept: &mut Vec<Kept>, now: Instant) -> Vec<Kept> {
    let mut released = Vec::new();
    let mut index = 0;
    while index < kept.len() {
        let entry = &mut kept[index];
        if Arc::strong_count(&entry.connection) > 1 {
            entry.idle_since = None;
        } else if now.duration_since(*entry.idle_since.get_or_insert(now)) >= LINGER {
            released.push(kept.swap_remove(index));
            continue;
        }
        index += 1;
    }
    released
}

fn lock() -> MutexGuard<'static, Lingering> {
    // The list is consistent between statements.
    LINGERING.lock().unwrap_or_else(PoisonError::into_inner)
}
