//! What can go wrong listening, connecting, authenticating and exchanging
//! messages.

use std::io::{self, ErrorKind};
use std::time::Duration;

use tensorshare_compat::connection::{AuthError, FramingError};
use tensorshare_strategies::Errno;

use super::Address;

/// Why a listener, client or connection operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// A string or byte string is not a usable `AF_UNIX` address or TCP
    /// endpoint.
    #[error("invalid socket address {address:?}: {reason}")]
    InvalidAddress {
        /// The address as given, escaped.
        address: String,
        /// What is wrong with it and what to do instead.
        reason: String,
    },
    /// An authkey could not be parsed or made. The message never contains
    /// key material.
    #[error("invalid authkey: {0}")]
    InvalidAuthkey(String),
    /// The listening socket could not be created.
    #[error("cannot listen on {address}: {cause}{hint}", hint = bind_hint(cause))]
    Bind {
        /// Where we tried to listen.
        address: Address,
        /// The OS error.
        cause: io::Error,
    },
    /// The listener could not be reached.
    #[error("cannot connect to {address}: {cause}{hint}", hint = connect_hint(cause))]
    Connect {
        /// Where we tried to connect.
        address: Address,
        /// The OS error.
        cause: io::Error,
    },
    /// Waiting for the next connection failed. With a non-blocking listener
    /// the cause is [`ErrorKind::WouldBlock`] when no peer is waiting.
    #[error(
        "accepting a connection on {address} failed: {cause}{hint}",
        hint = accept_hint(cause)
    )]
    Accept {
        /// The listener's address.
        address: Address,
        /// The OS error.
        cause: io::Error,
    },
    /// The authkey handshake with one peer failed: different authkeys, or a
    /// peer that does not speak the handshake. Only that connection is
    /// closed; a listener keeps serving.
    #[error("handshake with a peer on {address} failed: {cause}")]
    Auth {
        /// The listener's address.
        address: Address,
        /// What the handshake saw.
        cause: AuthError,
    },
    /// The authkey handshake did not finish in time. Only that connection is
    /// closed; a listener keeps serving.
    #[error(
        "handshake with a peer on {address} did not finish within {timeout:?}: the peer is \
         stuck or is not a multiprocessing.connection endpoint with an authkey; raise \
         ConnectionOptions::with_handshake_timeout if it is only slow"
    )]
    HandshakeTimeout {
        /// The listener's address.
        address: Address,
        /// The deadline that passed.
        timeout: Duration,
    },
    /// The peer announced a message above
    /// [`ConnectionOptions::with_max_message_bytes`](super::ConnectionOptions::with_max_message_bytes).
    /// Nothing was allocated for it; its payload is still unread, so the
    /// connection cannot be used any more.
    #[error(
        "the peer announced a {claimed}-byte message, above the limit of {limit} bytes; raise \
         ConnectionOptions::with_max_message_bytes if messages that large are expected (this \
         connection is no longer usable)"
    )]
    MessageTooLarge {
        /// The length the peer announced.
        claimed: u64,
        /// The limit in force.
        limit: u64,
    },
    /// The peer closed the connection between two messages (Python's
    /// `EOFError`).
    #[error("the peer closed the connection")]
    Closed,
    /// No message arrived before the read timeout set with
    /// [`Connection::set_read_timeout`](super::Connection::set_read_timeout).
    /// What arrived of a message is kept, and the next receive goes on
    /// with it.
    #[error(
        "no complete message arrived within the read timeout; what arrived of one is kept, \
         and the next receive goes on with it"
    )]
    ReadTimeout,
    /// A message could not be read: it was cut short or malformed, or the
    /// socket failed. The connection cannot be used any more.
    #[error("receiving a message failed: {0}")]
    Receive(FramingError),
    /// A message could not be sent.
    #[error("sending a {len}-byte message failed: {cause}{hint}", hint = send_hint(cause))]
    Send {
        /// The payload length.
        len: usize,
        /// The OS error.
        cause: io::Error,
    },
    /// Another socket or file operation failed.
    #[error("{context}: {cause}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        cause: io::Error,
    },
}

impl ConnectionError {
    /// Whether only one peer's connection failed during its handshake
    /// ([`Auth`](Self::Auth) or [`HandshakeTimeout`](Self::HandshakeTimeout)):
    /// a server logs it and accepts the next connection.
    pub fn is_handshake_failure(&self) -> bool {
        matches!(self, Self::Auth { .. } | Self::HandshakeTimeout { .. })
    }

    /// Whether this is a non-blocking listener reporting that no peer is
    /// waiting.
    pub fn is_would_block(&self) -> bool {
        matches!(self, Self::Accept { cause, .. } if cause.kind() == ErrorKind::WouldBlock)
    }

    /// The OS error behind this one, if a socket operation failed (also
    /// inside the handshake or while reading a message). Messages include
    /// it already; this is for callers that act on the errno.
    pub(crate) fn io_error(&self) -> Option<&io::Error> {
        match self {
            Self::Bind { cause, .. }
            | Self::Connect { cause, .. }
            | Self::Accept { cause, .. }
            | Self::Send { cause, .. }
            | Self::Io { cause, .. } => Some(cause),
            Self::Receive(FramingError::Io(cause))
            | Self::Auth {
                cause: AuthError::Io(FramingError::Io(cause)),
                ..
            } => Some(cause),
            _ => None,
        }
    }

    pub(crate) fn io(context: impl Into<String>, cause: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            cause,
        }
    }

    /// A receive failure, with end of stream, timeouts and the size limit
    /// told apart so that callers can act on them.
    pub(crate) fn from_receive(error: FramingError) -> Self {
        match error {
            FramingError::Closed => Self::Closed,
            FramingError::TooLarge { claimed, limit } => Self::MessageTooLarge { claimed, limit },
            FramingError::Io(cause) if is_timeout(&cause) => Self::ReadTimeout,
            other => Self::Receive(other),
        }
    }

    /// A handshake failure on a connection to or from `address`.
    pub(crate) fn from_handshake(address: &Address, timeout: Duration, error: AuthError) -> Self {
        match error {
            AuthError::Io(FramingError::Io(cause)) if is_timeout(&cause) => {
                Self::HandshakeTimeout {
                    address: address.clone(),
                    timeout,
                }
            }
            cause => Self::Auth {
                address: address.clone(),
                cause,
            },
        }
    }
}

/// Whether a socket error is an expired `SO_RCVTIMEO` / `SO_SNDTIMEO` (Linux
/// reports `EAGAIN`) or our own handshake deadline.
pub(crate) fn is_timeout(error: &io::Error) -> bool {
    matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

fn bind_hint(error: &io::Error) -> &'static str {
    match error.kind() {
        ErrorKind::AddrInUse => {
            "; another process is listening there, or a stale socket file is left behind: \
             remove the file if no process uses it, or choose another address"
        }
        ErrorKind::PermissionDenied => "; choose a directory this user may create files in",
        ErrorKind::NotFound => "; the directory does not exist: create it first",
        _ => "",
    }
}

fn connect_hint(error: &io::Error) -> &'static str {
    match error.kind() {
        ErrorKind::NotFound | ErrorKind::ConnectionRefused => {
            "; is the listener running at that address? (a listener on a path removes its \
             socket file when it stops; a TCP listener must be bound to an address this host \
             can reach, not 127.0.0.1 on another host)"
        }
        ErrorKind::PermissionDenied => "; this user may not open the socket file",
        _ => "",
    }
}

/// Whether `error` is `EMFILE` or `ENFILE`: this process or the system has
/// no fd to spare.
pub(crate) fn is_fd_exhaustion(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error().map(Errno::from_raw),
        Some(Errno::EMFILE | Errno::ENFILE)
    )
}

fn accept_hint(error: &io::Error) -> &'static str {
    if is_fd_exhaustion(error) {
        "; too many open files: close connections you no longer need, or raise `ulimit -n`"
    } else {
        ""
    }
}

fn send_hint(error: &io::Error) -> &'static str {
    match error.kind() {
        ErrorKind::BrokenPipe | ErrorKind::ConnectionReset => "; the peer closed the connection",
        ErrorKind::WouldBlock | ErrorKind::TimedOut => {
            "; the peer did not read within the write timeout"
        }
        _ => "",
    }
}
