//! The serving loop: `poll` over the listener, the shutdown fd and every
//! client, accepting, and the timers for idleness and orphaned names.

use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::registrations::Registration;
use super::session::Client;
use super::{ManagerReport, StopReason};
use crate::platform::errno_of;
use crate::platform::segment_name::SegmentName;
use crate::services::shm_manager::ManagerError;

/// How long to stop accepting after `accept` failed (out of fds): the
/// connection stays queued, so the listener would poll readable at once.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How often at most a failing `accept` is logged.
const ACCEPT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The serving loop's state.
pub(super) struct ServeState {
    pub(super) idle_timeout: Duration,
    /// How long a name a message still counts is kept with no client.
    pub(super) in_flight_wait: Duration,
    /// The connected clients, by id: clients are numbered in the order they
    /// were accepted, so the next id is `report.clients`.
    pub(super) clients: HashMap<u64, Client>,
    pub(super) names: HashMap<SegmentName, Registration>,
    /// Orphaned names in the order they were orphaned; entries whose name
    /// was registered or orphaned again since are skipped when they expire.
    pub(super) orphans: VecDeque<(Instant, SegmentName)>,
    accept_paused_until: Option<Instant>,
    /// When an `accept` failure was last logged: at most one line per
    /// [`ACCEPT_LOG_INTERVAL`].
    accept_logged_at: Option<Instant>,
    idle_since: Option<Instant>,
    pub(super) report: ManagerReport,
}

pub(super) fn log(message: std::fmt::Arguments<'_>) {
    eprintln!("tensorshare manager: {message}");
}

impl ServeState {
    pub(super) fn new(idle_timeout: Duration, in_flight_wait: Duration) -> Self {
        ServeState {
            idle_timeout,
            in_flight_wait,
            clients: HashMap::new(),
            names: HashMap::new(),
            orphans: VecDeque::new(),
            accept_paused_until: None,
            accept_logged_at: None,
            idle_since: None,
            report: ManagerReport {
                stop: StopReason::Idle,
                clients: 0,
                rejected_clients: 0,
                registrations: 0,
                unlinked: Vec::new(),
                left_to_other_users: Vec::new(),
                left_held: Vec::new(),
            },
        }
    }

    pub(super) fn run(
        &mut self,
        listener: &UnixListener,
        shutdown: Option<&OwnedFd>,
    ) -> Result<StopReason, ManagerError> {
        loop {
            let now = Instant::now();
            self.expire_orphans(now);
            if self.clients.is_empty() {
                let since = *self.idle_since.get_or_insert(now);
                if now >= since + self.idle_timeout {
                    // One last look: a client may have connected just now.
                    self.accept_paused_until = None;
                    if self.accept(listener, now) == 0 {
                        if !self.unlink_unheld(now) {
                            return Ok(StopReason::Idle);
                        }
                        // A process registered with a manager that died
                        // still maps a name this one is left to unlink; it
                        // may be dying without counting down. Look again
                        // after another idle timeout rather than leave the
                        // name to nobody.
                        self.idle_since = Some(now);
                    }
                    continue;
                }
            } else {
                self.idle_since = None;
            }
            let listening = self.accept_paused_until.is_none_or(|until| now >= until);
            if listening {
                self.accept_paused_until = None;
            }

            let mut fds = Vec::with_capacity(2 + self.clients.len());
            if let Some(fd) = shutdown {
                fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
            }
            if listening {
                fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
            }
            let mut ids = Vec::with_capacity(self.clients.len());
            for (id, client) in &self.clients {
                let events = if client.owed > 0 {
                    PollFlags::POLLOUT
                } else {
                    PollFlags::POLLIN
                };
                fds.push(PollFd::new(client.stream.as_fd(), events));
                ids.push(*id);
            }
            let timeout = self.next_deadline().map_or(PollTimeout::NONE, |at| {
                poll_timeout(at.saturating_duration_since(now))
            });
            match poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(Errno::ENOMEM | Errno::EAGAIN) => {
                    std::thread::sleep(ACCEPT_BACKOFF);
                    continue;
                }
                Err(errno) => {
                    return Err(ManagerError::Serve {
                        operation: "poll",
                        errno,
                    });
                }
            }
            // Collected so that the borrow of the clients' streams ends
            // before they are serviced; in the order the fds were pushed.
            let mut woke = fds
                .iter()
                .map(|fd| fd.revents().unwrap_or(PollFlags::empty()))
                .collect::<Vec<_>>()
                .into_iter();
            drop(fds);
            let mut next_woke = || woke.next().is_some_and(|events| !events.is_empty());

            if shutdown.is_some() && next_woke() {
                return Ok(StopReason::Shutdown);
            }
            let now = Instant::now();
            if listening && next_woke() {
                self.accept(listener, now);
            }
            for (id, events) in ids.into_iter().zip(woke) {
                if !events.is_empty() {
                    self.service(id, events, now);
                }
            }
        }
    }

    /// The earliest moment the loop must wake without an event.
    fn next_deadline(&self) -> Option<Instant> {
        let idle = self.idle_since.map(|since| since + self.idle_timeout);
        let orphan = self
            .orphans
            .front()
            .map(|(since, _)| *since + self.idle_timeout);
        [idle, orphan, self.accept_paused_until]
            .into_iter()
            .flatten()
            .min()
    }

    /// Accepts every waiting connection; how many.
    fn accept(&mut self, listener: &UnixListener, now: Instant) -> usize {
        let mut accepted = 0;
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    let id = self.report.clients;
                    self.clients.insert(id, Client::new(stream));
                    self.report.clients += 1;
                    accepted += 1;
                }
                Err(err) if err.kind() == ErrorKind::WouldBlock => return accepted,
                Err(err)
                    if matches!(
                        err.kind(),
                        ErrorKind::Interrupted | ErrorKind::ConnectionAborted
                    ) => {}
                Err(err) => {
                    // Out of fds, most likely: the connection stays queued
                    // and the listener polls readable at once, so stop
                    // listening for a moment and serve the others.
                    if self
                        .accept_logged_at
                        .is_none_or(|at| now.saturating_duration_since(at) >= ACCEPT_LOG_INTERVAL)
                    {
                        self.accept_logged_at = Some(now);
                        log(format_args!(
                            "cannot accept a client ({}): retrying every {}ms; raise `ulimit -n` \
                             if this persists",
                            errno_of(&err),
                            ACCEPT_BACKOFF.as_millis()
                        ));
                    }
                    self.accept_paused_until = Some(now + ACCEPT_BACKOFF);
                    return accepted;
                }
            }
        }
    }
}

/// A poll timeout of `duration`, rounded up to the next millisecond so that
/// a wake-up is never early.
pub(in crate::services::shm_manager) fn poll_timeout(duration: Duration) -> PollTimeout {
    let millis = duration.as_nanos().div_ceil(1_000_000);
    i32::try_from(millis).map_or(PollTimeout::MAX, |ms| {
        PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
    })
}
