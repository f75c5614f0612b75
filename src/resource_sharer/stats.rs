//! [`SharerStats`]: what a sharer has served and refused.

use std::sync::atomic::{AtomicU64, Ordering};

use super::serve::Outcome;

/// What a process's resource sharer has done since it started.
///
/// Refused connections are closed and counted, never logged: the sharer
/// keeps serving.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharerStats {
    /// Fds sent to a receiver.
    pub served: u64,
    /// Fds closed at their receiver's request because they reached it
    /// attached to the message itself.
    pub released: u64,
    /// Keys whose storages a tensorshare receiver reported unmapped, so that
    /// their memory may be reused.
    pub unmapped: u64,
    /// Connections from processes of another user (root's are served),
    /// closed before the handshake.
    pub other_user: u64,
    /// Clients whose authkey differs from the sharer's.
    pub wrong_authkey: u64,
    /// Clients that did not follow the authkey handshake.
    pub bad_handshake: u64,
    /// Requests that were not a pickled `(key, pid)` of ints, or too large.
    pub malformed_request: u64,
    /// Requests for a key never registered, already fetched or withdrawn.
    pub unknown_key: u64,
    /// Clients that did not finish within the connection timeout.
    pub timed_out: u64,
    /// Clients that closed the connection before asking for a key.
    pub disconnected: u64,
    /// Fds that could not be sent (the client went away); the fd was closed,
    /// as CPython does.
    pub send_failed: u64,
    /// `accept` calls that failed (for example with too many open files).
    pub accept_failed: u64,
    /// Registrations not yet fetched nor withdrawn.
    pub pending: usize,
}

/// The live counts behind [`SharerStats`].
#[derive(Default)]
pub(crate) struct Counters {
    served: AtomicU64,
    released: AtomicU64,
    unmapped: AtomicU64,
    other_user: AtomicU64,
    wrong_authkey: AtomicU64,
    bad_handshake: AtomicU64,
    malformed_request: AtomicU64,
    unknown_key: AtomicU64,
    timed_out: AtomicU64,
    disconnected: AtomicU64,
    send_failed: AtomicU64,
    accept_failed: AtomicU64,
}

impl Counters {
    pub(crate) fn record(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Served => &self.served,
            Outcome::Released(keys) => {
                self.released.fetch_add(keys as u64, Ordering::Relaxed);
                return;
            }
            Outcome::Unmapped { keys, released } => {
                self.unmapped.fetch_add(keys as u64, Ordering::Relaxed);
                self.released.fetch_add(released as u64, Ordering::Relaxed);
                return;
            }
            Outcome::OtherUser => &self.other_user,
            Outcome::WrongAuthkey => &self.wrong_authkey,
            Outcome::BadHandshake => &self.bad_handshake,
            Outcome::MalformedRequest => &self.malformed_request,
            Outcome::UnknownKey => &self.unknown_key,
            Outcome::TimedOut => &self.timed_out,
            Outcome::Disconnected => &self.disconnected,
            Outcome::SendFailed => &self.send_failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now, with `pending` registrations.
    pub(crate) fn snapshot(&self, pending: usize) -> SharerStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        SharerStats {
            served: read(&self.served),
            released: read(&self.released),
            unmapped: read(&self.unmapped),
            other_user: read(&self.other_user),
            wrong_authkey: read(&self.wrong_authkey),
            bad_handshake: read(&self.bad_handshake),
            malformed_request: read(&self.malformed_request),
            unknown_key: read(&self.unknown_key),
            timed_out: read(&self.timed_out),
            disconnected: read(&self.disconnected),
            send_failed: read(&self.send_failed),
            accept_failed: read(&self.accept_failed),
            pending,
        }
    }

    pub(crate) fn record_accept_failure(&self) {
        self.accept_failed.fetch_add(1, Ordering::Relaxed);
    }
}
