//! One socket to a manager and libshm's exchange over it: registrations
//! answered `OK`, frees answered by nothing; or, with this crate's manager,
//! registrations answered by nothing either
//! ([`pipeline`](crate::services::shm_manager::pipeline)).

use std::io::{ErrorKind, Read};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, MsgFlags, SockFlag, SockType, UnixAddr, connect as connect_socket, getsockopt,
    send, socket, sockopt::PeerCredentials,
};

use super::REPLY_TIMEOUT;
use crate::platform::errno_of;
use crate::platform::owner::UnixUser;
use crate::platform::owner::is_own_uid;
use crate::platform::segment_name::SegmentName;
use crate::services::shm_manager::alloc_info::{ALLOC_INFO_SIZE, AllocInfo};
use crate::services::shm_manager::in_flight::in_flight_notice;
use crate::services::shm_manager::pipeline::{PIPELINE_ACK, pipeline_probe};
use crate::services::shm_manager::{ManagerError, ManagerHandle};

/// The most frees held back to go out with the next registration.
const MAX_PENDING_FREES: usize = 32;

/// How long to pause between attempts while a manager's backlog is full.
const CONNECT_RETRY: Duration = Duration::from_millis(10);

/// The socket to one manager and what is still expected on it.
#[derive(Debug)]
pub(super) struct Link {
    pub(super) handle: ManagerHandle,
    /// Shared with the thread that watches for the manager's exit.
    pub(super) stream: Arc<UnixStream>,
    /// Bytes of `OK` replies the manager still owes: two per registration,
    /// including those whose caller stopped waiting.
    owed: usize,
    /// The second byte of the reply whose first came last: `K` of an `OK`,
    /// or that of [`PIPELINE_ACK`].
    mid_reply: Option<u8>,
    /// Whether registrations are answered, as far as is known yet.
    pub(super) replies: Replies,
    /// Frees not sent yet, encoded: they go out with the next registration,
    /// when [`MAX_PENDING_FREES`] have gathered, or when the connection
    /// closes, so that the manager wakes once for both.
    pending_frees: Vec<u8>,
    /// Why the link can no longer be used, once it cannot.
    pub(super) broken: Option<String>,
    /// How long a registration waits for its `OK`.
    pub(super) reply_timeout: Duration,
    /// The receive timeout set on the socket: `reply_timeout` from
    /// [`Link::open`] on, so that a registration's first read needs no
    /// `setsockopt`; only a read waiting out a remainder changes it.
    read_timeout: Duration,
}

impl Link {
    /// Connects to the manager at `handle`, which must run as this
    /// process's effective user.
    pub(super) fn open(handle: &ManagerHandle) -> Result<Self, ManagerError> {
        let stream = connect_stream(handle)?;
        let peer = getsockopt(&stream, PeerCredentials).map_err(|errno| ManagerError::Connect {
            handle: handle.to_string(),
            errno,
        })?;
        // Root included: a handle comes from a peer, and another user's
        // manager would be told, and could act on, this user's segments.
        if !is_own_uid(peer.uid()) {
            return Err(ManagerError::ForeignManager {
                handle: handle.to_string(),
                owner: UnixUser::of(peer.uid()),
                this: UnixUser::effective(),
            });
        }
        let timeouts = stream
            .set_write_timeout(Some(REPLY_TIMEOUT))
            .and_then(|()| stream.set_read_timeout(Some(REPLY_TIMEOUT)));
        if let Err(err) = timeouts {
            return Err(ManagerError::Connect {
                handle: handle.to_string(),
                errno: errno_of(&err),
            });
        }
        Ok(Link {
            handle: handle.clone(),
            stream: Arc::new(stream),
            owed: 0,
            mid_reply: None,
            replies: Replies::Unasked,
            pending_frees: Vec::new(),
            broken: None,
            reply_timeout: REPLY_TIMEOUT,
            read_timeout: REPLY_TIMEOUT,
        })
    }

    /// Marks the link broken by `error`, and returns it.
    pub(super) fn fail(&mut self, error: ManagerError) -> ManagerError {
        self.broken = Some(error.to_string());
        error
    }

    /// Marks the link broken by its manager having hung up.
    pub(super) fn fail_closed(&mut self) {
        let handle = self.handle.to_string();
        self.fail(ManagerError::Closed { handle });
    }

    /// [`ManagerError::Broken`] once the link is.
    pub(super) fn check_usable(&self) -> Result<(), ManagerError> {
        match &self.broken {
            Some(cause) => Err(ManagerError::Broken {
                handle: self.handle.to_string(),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Registers `name` and waits for its `OK`, or only sends it once the
    /// manager said it takes registrations unanswered; see
    /// [`ManagerConnection::register`](super::ManagerConnection::register).
    pub(super) fn register(&mut self, name: &SegmentName) -> Result<(), ManagerError> {
        self.check_usable()?;
        let registration = AllocInfo::register(name.clone()).encode();
        match self.replies {
            Replies::Unasked => {
                // One `send`: the probe (a session's first message), the
                // frees due, and the registration whose answer tells which
                // manager this is.
                let mut batch = pipeline_probe(registration_pid()).to_vec();
                batch.extend_from_slice(&self.pending_frees);
                batch.extend_from_slice(&registration);
                self.send_message(&batch)?;
                self.pending_frees.clear();
                self.replies = Replies::Asked;
                self.owed += 2;
            }
            Replies::Asked => {
                // The answer is still out (an earlier call timed out):
                // until it comes, nothing says whether this registration
                // would be answered.
                self.await_replies()?;
                return self.register(name);
            }
            Replies::Answered => {
                self.send_with_frees(&registration)?;
                self.owed += 2;
            }
            Replies::Unanswered => return self.send_with_frees(&registration),
        }
        self.await_replies()
    }

    /// Sends the probe alone, as a session's first message, and waits for
    /// its answer: only a manager of this crate's answers it (torch's
    /// never does), and only while it runs.
    pub(super) fn probe(&mut self) -> Result<(), ManagerError> {
        self.send_message(&pipeline_probe(registration_pid()))?;
        self.replies = Replies::Asked;
        self.owed += 2;
        self.await_replies()
    }

    /// Waits up to the reply timeout for every reply owed.
    fn await_replies(&mut self) -> Result<(), ManagerError> {
        let started = Instant::now();
        let deadline = started + self.reply_timeout;
        let mut reply = [0u8; 64];
        let mut first_read = true;
        while self.owed > 0 {
            let now = Instant::now();
            if now >= deadline {
                return Err(ManagerError::ReplyTimeout {
                    handle: self.handle.to_string(),
                    waited: now - started,
                });
            }
            // The first read waits the whole timeout, the later ones what is
            // left of it. Never ZERO: std refuses it; the deadline check
            // above keeps the remainder positive.
            let wait = if first_read {
                self.reply_timeout
            } else {
                deadline - now
            };
            first_read = false;
            if wait != self.read_timeout && self.stream.set_read_timeout(Some(wait)).is_ok() {
                self.read_timeout = wait;
            }
            let want = self.owed.min(reply.len());
            match (&*self.stream).read(&mut reply[..want]) {
                Ok(0) => {
                    return Err(self.fail(ManagerError::Closed {
                        handle: self.handle.to_string(),
                    }));
                }
                Ok(n) => self.take_reply(&reply[..n])?,
                Err(err)
                    if matches!(
                        err.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(err) => {
                    let error = ManagerError::Receive {
                        handle: self.handle.to_string(),
                        errno: errno_of(&err),
                    };
                    return Err(self.fail(error));
                }
            }
        }
        Ok(())
    }

    /// Counts the `OK` bytes of `reply` off what is owed; the first reply
    /// after the probe may be [`PIPELINE_ACK`] instead, and settles whether
    /// registrations are answered.
    fn take_reply(&mut self, reply: &[u8]) -> Result<(), ManagerError> {
        for &byte in reply {
            let expected = match self.mid_reply.take() {
                Some(second) => byte == second,
                None if byte == b'O' => {
                    self.mid_reply = Some(b'K');
                    if self.replies == Replies::Asked {
                        self.replies = Replies::Answered;
                    }
                    true
                }
                None if byte == PIPELINE_ACK[0] && self.replies == Replies::Asked => {
                    self.mid_reply = Some(PIPELINE_ACK[1]);
                    self.replies = Replies::Unanswered;
                    true
                }
                None => false,
            };
            if !expected {
                let error = ManagerError::UnexpectedReply {
                    reply: String::from_utf8_lossy(reply).into_owned(),
                    handle: self.handle.to_string(),
                };
                return Err(self.fail(error));
            }
            self.owed -= 1;
        }
        Ok(())
    }

    /// Sends the frees due and `registration` in one `send`.
    fn send_with_frees(
        &mut self,
        registration: &[u8; ALLOC_INFO_SIZE],
    ) -> Result<(), ManagerError> {
        if self.pending_frees.is_empty() {
            return self.send_message(registration);
        }
        let mut batch = std::mem::take(&mut self.pending_frees);
        batch.extend_from_slice(registration);
        self.send_message(&batch).inspect_err(|_| {
            // Kept for the next attempt when nothing went out (a broken link
            // sends nothing more anyway).
            batch.truncate(batch.len() - ALLOC_INFO_SIZE);
            self.pending_frees = std::mem::take(&mut batch);
        })
    }

    /// Tells the manager this process no longer uses `name`; no answer
    /// comes, so none is awaited, and the message waits for the next one
    /// to go with it.
    ///
    /// A free sent late costs nothing but time: until the manager reads
    /// it, it counts this process among the name's holders, which keeps
    /// the name from being unlinked as an orphan while the process lives;
    /// the name goes at the manager's exit, as every name does.
    pub(super) fn free(&mut self, name: &SegmentName) -> Result<(), ManagerError> {
        self.check_usable()?;
        self.pending_frees
            .extend_from_slice(&AllocInfo::free(name.clone()).encode());
        if self.pending_frees.len() >= MAX_PENDING_FREES * ALLOC_INFO_SIZE {
            return self.flush_frees();
        }
        Ok(())
    }

    /// Tells this crate's manager that a message naming `name` is on its
    /// way to process `receiver` ([`in_flight`](super::super::in_flight)),
    /// with the frees due; to another manager, nothing.
    pub(super) fn in_flight(
        &mut self,
        name: &SegmentName,
        receiver: u32,
    ) -> Result<(), ManagerError> {
        self.check_usable()?;
        if self.replies != Replies::Unanswered {
            return Ok(());
        }
        self.send_with_frees(&in_flight_notice(receiver, name))
    }

    /// Sends the frees due now.
    pub(super) fn flush_frees(&mut self) -> Result<(), ManagerError> {
        if self.pending_frees.is_empty() {
            return Ok(());
        }
        let frees = std::mem::take(&mut self.pending_frees);
        self.send_message(&frees)
    }

    /// Sends a whole message. `MSG_NOSIGNAL`: a manager that is gone is an
    /// error here, never a `SIGPIPE` that kills the process.
    fn send_message(&mut self, message: &[u8]) -> Result<(), ManagerError> {
        let mut sent = 0;
        while sent < message.len() {
            match send(
                self.stream.as_raw_fd(),
                &message[sent..],
                MsgFlags::MSG_NOSIGNAL,
            ) {
                Ok(n) => sent += n,
                Err(Errno::EINTR) => {}
                Err(errno) => {
                    let error = ManagerError::Send {
                        handle: self.handle.to_string(),
                        errno,
                    };
                    // Nothing went out on a timeout: the stream is still in
                    // step and the next message may pass.
                    if sent == 0 && errno == Errno::EAGAIN {
                        return Err(error);
                    }
                    return Err(self.fail(error));
                }
            }
        }
        Ok(())
    }
}

/// Whether a manager answers registrations, as a [`Link`] knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Replies {
    /// Nothing sent yet: the first registration carries the probe.
    Unasked,
    /// The probe went out; its answer has not come.
    Asked,
    /// libshm's manager, or one that is not this crate's: `OK` per
    /// registration.
    Answered,
    /// This crate's manager: registrations are only sent.
    Unanswered,
}

/// The pid a registration carries: this process's.
fn registration_pid() -> i32 {
    nix::unistd::getpid().as_raw()
}

/// Whether `error` says the manager at the other end has gone (as opposed
/// to answering garbage or being slow).
pub(super) fn manager_gone(error: &ManagerError) -> bool {
    match error {
        ManagerError::Closed { .. } => true,
        ManagerError::Send { errno, .. } | ManagerError::Receive { errno, .. } => {
            matches!(errno, Errno::EPIPE | Errno::ECONNRESET | Errno::ENOTCONN)
        }
        _ => false,
    }
}

/// Connects to `handle`, retrying while the manager's backlog is full
/// (`EAGAIN`) for up to [`REPLY_TIMEOUT`]: a blocking connect would wait
/// without bound on a manager that stopped accepting.
fn connect_stream(handle: &ManagerHandle) -> Result<UnixStream, ManagerError> {
    let error = |errno| ManagerError::Connect {
        handle: handle.to_string(),
        errno,
    };
    let address = UnixAddr::new(handle.path()).map_err(error)?;
    let deadline = Instant::now() + REPLY_TIMEOUT;
    loop {
        let fd = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )
        .map_err(error)?;
        match connect_socket(fd.as_raw_fd(), &address) {
            Ok(()) => {
                let stream = UnixStream::from(fd);
                stream
                    .set_nonblocking(false)
                    .map_err(|err| error(errno_of(&err)))?;
                return Ok(stream);
            }
            Err(Errno::EAGAIN | Errno::EINTR) if Instant::now() < deadline => {
                std::thread::sleep(CONNECT_RETRY);
            }
            Err(errno) => return Err(error(errno)),
        }
    }
}
