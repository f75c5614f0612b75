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
//!
//! A thread lets them go, and runs only while there may be something to
//! let go: while a kept connection is idle, and for a few rounds after a
//! connection was handed out ([`keep`]) or a segment let go
//! ([`released`]), since a holder lets go of its connection soon after. A process that holds its connections
//! (a strategy built on one, a long-held tensor) has no thread polling
//! them.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use super::ManagerConnection;

/// How long a connection nothing else holds is kept open.
pub(super) const LINGER: Duration = Duration::from_secs(1);

/// The most connections kept open for nothing; past it, the one idle the
/// longest is let go first. Each costs an fd and keeps a manager alive.
const MAX_LINGERING: usize = 8;

/// Rounds the thread goes on with nothing idle after a connection was last
/// handed out or a segment let go, for the holder to drop its connection:
/// a holder lets go of it just after it releases its segment (or, having
/// registered nothing, soon after it connected), so only one stalled this
/// long (2 s) leaves an idle connection open until the next use.
const ROUNDS_AFTER_USE: u32 = 4;

/// Connections held for [`LINGER`] after their last use, and whether a
/// thread is there to let them go.
static LINGERING: Mutex<Lingering> = Mutex::new(Lingering {
    kept: Vec::new(),
    owner: None,
    sweeping: false,
    rounds_left: 0,
});

struct Lingering {
    kept: Vec<Kept>,
    /// The process the list belongs to: a child forked from it has a copy
    /// of the list, and no thread.
    owner: Option<u32>,
    /// Whether the owner's thread runs.
    sweeping: bool,
    /// Rounds the thread runs on even with nothing idle.
    rounds_left: u32,
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
        lingering.rounds_left = ROUNDS_AFTER_USE;
        ensure_sweeping(&mut lingering);
        return;
    }
    lingering.rounds_left = ROUNDS_AFTER_USE;
    if !ensure_sweeping(&mut lingering) {
        return;
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

/// Notes that a segment registered through a kept connection is being
/// let go: its connection may fall idle, so the thread runs to see.
pub(super) fn released() {
    // Never waits for good: in a child forked while another thread held the
    // lock it stays held, and the child has no thread to let go anyway.
    // Others hold it for microseconds.
    let mut attempts = 0;
    let mut lingering = loop {
        match LINGERING.try_lock() {
            Ok(lingering) => break lingering,
            Err(TryLockError::Poisoned(poisoned)) => break poisoned.into_inner(),
            Err(TryLockError::WouldBlock) if attempts < 10 => {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(TryLockError::WouldBlock) => return,
        }
    };
    if lingering.kept.is_empty() {
        return;
    }
    lingering.rounds_left = ROUNDS_AFTER_USE;
    ensure_sweeping(&mut lingering);
}

/// Starts the thread that lets connections go, unless it runs; false when
/// it could not be started.
fn ensure_sweeping(lingering: &mut Lingering) -> bool {
    let this_process = std::process::id();
    if lingering.owner != Some(this_process) {
        // What a forked child inherited is its parent's to let go: dropped
        // here, each would shut down the socket the two share.
        std::mem::forget(std::mem::take(&mut lingering.kept));
        lingering.owner = Some(this_process);
        lingering.sweeping = false;
    }
    if lingering.sweeping {
        return true;
    }
    let spawned = std::thread::Builder::new()
        .name("tensorshare-shm-linger".into())
        .spawn(sweep_loop);
    lingering.sweeping = spawned.is_ok();
    lingering.sweeping
}

/// Lets go, every half [`LINGER`], of the connections idle that long; ends
/// when none is idle and no segment was let go for a few rounds.
fn sweep_loop() {
    loop {
        std::thread::sleep(LINGER / 2);
        let mut lingering = lock();
        let released = release_idle(&mut lingering.kept, Instant::now());
        let idle = lingering
            .kept
            .iter()
            .any(|kept| Arc::strong_count(&kept.connection) == 1);
        lingering.rounds_left = lingering.rounds_left.saturating_sub(1);
        let done = !idle && lingering.rounds_left == 0;
        if done {
            lingering.sweeping = false;
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
