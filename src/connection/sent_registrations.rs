//! The fds registered for the messages sent on one connection, withdrawn
//! once the process at its other end has exited without fetching them.
//!
//! A `DupFd` in a message is fetched by whoever unpickles it, which is
//! normally the process that reads the connection, while it reads. When
//! that process dies first (SIGKILL, the OOM killer), nobody else has the
//! message, and the fds would stay open in the sender until their
//! unfetched lifetime passes (5 minutes by default): a long-running server
//! whose clients die would hold an fd per message in flight to each. The
//! connection knows its peer (`SO_PEERCRED`); when it ends and that process
//! has exited or is exiting, what it did not fetch is closed at once. A
//! peer that closed the connection and lives on may still unpickle what it
//! read, so its fds wait for their lifetime as before.

use std::sync::{Arc, Weak};

use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use tensorshare_strategies::platform::process::has_exited;

use super::StreamSocket;

/// What holds the fds registered for the messages sent on a connection:
/// the resource sharer, in the sharing layer above.
pub(crate) trait RegisteredFds: Send + Sync {
    /// Keeps in `keys` only those still registered.
    fn retain_registered(&self, keys: &mut Vec<i64>);
    /// Withdraws the fds of `keys` still registered, closing them; returns
    /// how many it closed.
    fn withdraw_all(&self, keys: &[i64]) -> usize;
}

/// How many keys a connection notes before it first drops those already
/// fetched or released.
const FIRST_PRUNE: usize = 64;

/// The keys sent on one connection whose fds may still be registered, by
/// the sharer that holds them.
#[derive(Debug, Default)]
pub(super) struct SentRegistrations {
    /// The peer's pid when it connected (`None` inside when this pid
    /// namespace cannot name the peer); `None` until first asked, so that
    /// `SO_PEERCRED` is read once per connection, not per message.
    peer: Option<Option<u32>>,
    sharers: Vec<SharerKeys>,
}

#[derive(Debug)]
struct SharerKeys {
    sharer: Weak<dyn RegisteredFds>,
    keys: Vec<i64>,
    /// The length at which fetched and released keys are next dropped.
    prune_at: usize,
}

impl SentRegistrations {
    /// Notes `keys`, registered with `sharer` for a message just sent on
    /// `stream`.
    pub(super) fn note(
        &mut self,
        stream: &StreamSocket,
        sharer: &Arc<dyn RegisteredFds>,
        keys: &[i64],
    ) {
        if keys.is_empty() {
            return;
        }
        self.peer(stream);
        let weak = Arc::downgrade(sharer);
        let index = match self
            .sharers
            .iter()
            .position(|entry| Weak::ptr_eq(&entry.sharer, &weak))
        {
            Some(index) => index,
            None => {
                self.sharers.retain(|entry| entry.sharer.strong_count() > 0);
                self.sharers.push(SharerKeys {
                    sharer: weak,
                    keys: Vec::new(),
                    prune_at: FIRST_PRUNE,
                });
                self.sharers.len() - 1
            }
        };
        let entry = &mut self.sharers[index];
        entry.keys.extend_from_slice(keys);
        // Receivers fetch or release nearly every key within moments:
        // pruning when the list has doubled keeps it near the fds in
        // flight, at O(1) per key.
        if entry.keys.len() >= entry.prune_at {
            sharer.retain_registered(&mut entry.keys);
            entry.prune_at = (entry.keys.len() * 2).max(FIRST_PRUNE);
        }
    }

    /// The peer's pid when it connected, asked once; `None` when this pid
    /// namespace cannot name it, or over TCP.
    pub(super) fn peer(&mut self, stream: &StreamSocket) -> Option<u32> {
        *self.peer.get_or_insert_with(|| peer_pid(stream))
    }

    /// Withdraws every noted fd still registered, closing it, if the peer
    /// has exited or is exiting; returns how many it closed.
    pub(super) fn withdraw_if_peer_exited(&mut self) -> usize {
        if self.sharers.is_empty() || !self.peer.flatten().is_some_and(has_exited) {
            return 0;
        }
        std::mem::take(&mut self.sharers)
            .into_iter()
            .filter_map(|entry| Some(entry.sharer.upgrade()?.withdraw_all(&entry.keys)))
            .sum()
    }
}

impl Drop for SentRegistrations {
    fn drop(&mut self) {
        self.withdraw_if_peer_exited();
    }
}

/// The pid of the process at the other end of `stream` when it connected,
/// if this pid namespace can name it (`SO_PEERCRED` gives 0 otherwise);
/// `None` for a TCP peer, which may be on another host.
fn peer_pid(stream: &StreamSocket) -> Option<u32> {
    let credentials = getsockopt(stream.as_unix()?, PeerCredentials).ok()?;
    u32::try_from(credentials.pid()).ok().filter(|&pid| pid > 0)
}
