//! The receiving side: `DupFd.detach()` as a function.

use std::fmt;
use std::io::{self, ErrorKind};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use tensorshare_compat::connection::{AuthError, Dialect, client_handshake, write_message};
use tensorshare_compat::pickle::EncodeError;
use tensorshare_compat::resource_sharer::{
    DupFdRequest, MAX_RELEASE_KEYS, ReleaseRequest, UnmappedRequest,
};
use tensorshare_strategies::Errno;
use tensorshare_strategies::platform::fd_passing::{RecvFdsError, recv_fd_batch};

use crate::connection::deadline::DeadlineStream;
use crate::connection::is_timeout;
use crate::connection::{Address, ConnectionError};

/// Which step of a fetch failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FetchStage {
    /// Connecting to the sharer's socket.
    Connect,
    /// The authkey handshake.
    Handshake,
    /// Sending the `(key, pid)` request.
    Request,
    /// Receiving the fd.
    Receive,
}

impl fmt::Display for FetchStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Connect => "while connecting",
            Self::Handshake => "during the authkey handshake",
            Self::Request => "while sending the request",
            Self::Receive => "while waiting for the fd",
        })
    }
}

/// Why an fd could not be fetched from a resource sharer.
///
/// `address` fields hold the address with non-printable bytes escaped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The address is not a usable Unix socket address.
    #[error("invalid resource sharer address {address:?}: {reason}")]
    InvalidAddress {
        /// The address, escaped.
        address: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Nothing listens at the address any more.
    #[error(
        "no resource sharer is listening at {address} ({cause}): the sending process exited or \
         stopped sharing; a DupFd can only be fetched while its sender runs"
    )]
    SharerGone {
        /// The address, escaped.
        address: String,
        /// What `connect` failed with.
        cause: io::Error,
    },
    /// The sharer refused our authkey.
    #[error(
        "the resource sharer at {address} rejected our authkey: both processes must share \
         multiprocessing.current_process().authkey; give this process the sender's key \
         (tensorshare's commands take it in TENSORSHARE_AUTHKEY or --authkey-file)"
    )]
    WrongAuthkey {
        /// The address, escaped.
        address: String,
    },
    /// The handshake failed for a reason other than the authkey.
    #[error("authkey handshake with the resource sharer at {address} failed: {cause}")]
    Handshake {
        /// The address, escaped.
        address: String,
        /// What went wrong.
        cause: AuthError,
    },
    /// The sharer closed the connection instead of sending the fd.
    #[error(
        "the resource sharer at {address} closed the connection without sending fd {key}: the \
         sending process exited or already handed out this fd; each DupFd can be fetched once"
    )]
    NotServed {
        /// The address, escaped.
        address: String,
        /// The key asked for.
        key: i64,
    },
    /// The sharer did not finish within the timeout.
    #[error(
        "the resource sharer at {address} did not answer within {timeout:?} ({stage}): the \
         sending process may be stalled or busy; retry, or raise the timeout"
    )]
    TimedOut {
        /// The address, escaped.
        address: String,
        /// The timeout in force.
        timeout: Duration,
        /// Where it ran out.
        stage: FetchStage,
    },
    /// This process has no free fd for the socket or the received fd.
    #[error(
        "too many open files fetching fd {key} from {address} ({stage}): raise `ulimit -n` or \
         use the file_system strategy"
    )]
    TooManyOpenFiles {
        /// The address, escaped.
        address: String,
        /// The key asked for.
        key: i64,
        /// Which step ran out of fds.
        stage: FetchStage,
    },
    /// The sharer answered with something other than one fd.
    #[error("the resource sharer at {address} did not hand over the fd properly: {cause}")]
    Transfer {
        /// The address, escaped.
        address: String,
        /// What arrived instead.
        cause: RecvFdsError,
    },
    /// The request could not be encoded.
    #[error("could not encode the (key, pid) request: {0}")]
    EncodeRequest(EncodeError),
    /// The socket failed.
    #[error("talking to the resource sharer at {address} failed {stage}: {cause}")]
    Io {
        /// The address, escaped.
        address: String,
        /// Which step failed.
        stage: FetchStage,
        /// The OS error.
        cause: io::Error,
    },
}

// By hand rather than `#[from]`, which would also make the encoder's error
// the `source()`; the message includes it (see the crate's error docs).
impl From<EncodeError> for FetchError {
    fn from(error: EncodeError) -> Self {
        FetchError::EncodeRequest(error)
    }
}

impl FetchError {
    /// The OS error behind this one, if a socket operation failed.
    pub(crate) fn io_error(&self) -> Option<&io::Error> {
        match self {
            FetchError::SharerGone { cause, .. } | FetchError::Io { cause, .. } => Some(cause),
            FetchError::Handshake {
                cause: AuthError::Io(tensorshare_compat::connection::FramingError::Io(cause)),
                ..
            } => Some(cause),
            _ => None,
        }
    }
}

/// Fetches the fd registered under `key` with the resource sharer at
/// `address`, as `multiprocessing.resource_sharer.DupFd(...).detach()` does.
///
/// `address` is the first item of the `DupFd`'s `_id`: a socket path, or on
/// Linux an abstract name starting with NUL. `authkey` is the sending
/// process's `multiprocessing.current_process().authkey` (children started
/// by `multiprocessing` inherit their parent's). The steps: connect, answer
/// and deliver the authkey challenge, send the pickled `(key, pid)`, receive
/// one fd by `SCM_RIGHTS`. The returned fd is close-on-exec.
///
/// `timeout` bounds the handshake, request and receive together.
/// Connecting to a Unix socket does not block unless the sharer's backlog
/// is full.
///
/// # Errors
///
/// [`FetchError::SharerGone`] when nothing listens at `address`,
/// [`FetchError::WrongAuthkey`] when the authkeys differ,
/// [`FetchError::NotServed`] when the sharer has no such key (fetched
/// before, or the sender exited), [`FetchError::TimedOut`],
/// [`FetchError::TooManyOpenFiles`], [`FetchError::InvalidAddress`],
/// and [`FetchError::Handshake`], [`FetchError::Transfer`] or
/// [`FetchError::Io`] for a peer that does not follow the protocol or a
/// failing socket.
pub fn fetch_fd(
    address: &[u8],
    key: i64,
    authkey: &[u8],
    timeout: Duration,
) -> Result<OwnedFd, FetchError> {
    let shown = address.escape_ascii().to_string();
    let stream = connect(address, &shown, key)?;
    let mut io = DeadlineStream::new(&stream, timeout);
    handshake(&mut io, &shown, authkey, timeout)?;
    let pid = i64::from(std::process::id());
    let request = DupFdRequest { key, pid }.to_pickle()?;
    send_request(&mut io, &request, &shown, key, timeout)?;
    io.arm_read_timeout()
        .map_err(|cause| io_failure(&shown, timeout, FetchStage::Receive, cause))?;
    let mut fds = recv_fd_batch(stream.as_fd(), 1).map_err(|error| match error {
        RecvFdsError::EndOfStream
        | RecvFdsError::Os {
            errno: Errno::ECONNRESET,
        } => FetchError::NotServed {
            address: shown.clone(),
            key,
        },
        RecvFdsError::Os {
            errno: Errno::EAGAIN,
        } => FetchError::TimedOut {
            address: shown.clone(),
            timeout,
            stage: FetchStage::Receive,
        },
        // Only one fd was sent and one was asked for: the kernel drops it
        // when this process's fd table is full.
        RecvFdsError::ControlTruncated { .. } => FetchError::TooManyOpenFiles {
            address: shown.clone(),
            key,
            stage: FetchStage::Receive,
        },
        cause => FetchError::Transfer {
            address: shown.clone(),
            cause,
        },
    })?;
    // `recv_fd_batch` returns at least one fd and at most the one asked for.
    fds.pop().ok_or(FetchError::Transfer {
        address: shown,
        cause: RecvFdsError::MissingFds,
    })
}

/// Gives `keys` back to the tensorshare sharer at `address`: their fds
/// reached this process attached to the messages that named them, so the
/// sharer may close its copies. One connection and [`ReleaseRequest`] per
/// [`MAX_RELEASE_KEYS`] keys, none for no keys; the sharer answers nothing.
///
/// Only a tensorshare sharer understands this; CPython's counts it as a
/// malformed request and closes the connection.
///
/// # Errors
///
/// As [`fetch_fd`] up to the request; errors name the first key of the
/// batch that failed, and later batches are not sent.
pub fn release_fds(
    address: &[u8],
    keys: &[i64],
    authkey: &[u8],
    timeout: Duration,
) -> Result<(), FetchError> {
    send_keys(address, keys, authkey, timeout, |keys| {
        ReleaseRequest { keys }.to_pickle()
    })
}

/// Tells the tensorshare sharer at `address` that the storages that
/// arrived under `keys` are no longer mapped here, so that their sender may
/// reuse the memory ([`UnmappedRequest`]); batched as [`release_fds`].
///
/// # Errors
///
/// As [`release_fds`].
pub fn report_unmapped(
    address: &[u8],
    keys: &[i64],
    authkey: &[u8],
    timeout: Duration,
) -> Result<(), FetchError> {
    send_keys(address, keys, authkey, timeout, |keys| {
        UnmappedRequest { keys }.to_pickle()
    })
}

/// One connection and request, made by `request`, per
/// [`MAX_RELEASE_KEYS`] keys.
fn send_keys(
    address: &[u8],
    keys: &[i64],
    authkey: &[u8],
    timeout: Duration,
    request: impl Fn(Vec<i64>) -> Result<Vec<u8>, EncodeError>,
) -> Result<(), FetchError> {
    let shown = address.escape_ascii().to_string();
    for batch in keys.chunks(MAX_RELEASE_KEYS) {
        let first = batch.first().copied().unwrap_or_default();
        let stream = connect(address, &shown, first)?;
        let mut io = DeadlineStream::new(&stream, timeout);
        handshake(&mut io, &shown, authkey, timeout)?;
        let request = request(batch.to_vec())?;
        send_request(&mut io, &request, &shown, first, timeout)?;
    }
    Ok(())
}

/// Answers and delivers the authkey challenge, as `Client(address, authkey)`.
fn handshake(
    io: &mut DeadlineStream<'_>,
    shown: &str,
    authkey: &[u8],
    timeout: Duration,
) -> Result<(), FetchError> {
    client_handshake(io, authkey, Dialect::Modern)
        .map(drop)
        .map_err(|error| match error {
            AuthError::WrongAuthkey(_) => FetchError::WrongAuthkey {
                address: shown.to_owned(),
            },
            AuthError::Io(tensorshare_compat::connection::FramingError::Io(cause)) => {
                io_failure(shown, timeout, FetchStage::Handshake, cause)
            }
            cause => FetchError::Handshake {
                address: shown.to_owned(),
                cause,
            },
        })
}

/// Writes one request message.
fn send_request(
    io: &mut DeadlineStream<'_>,
    request: &[u8],
    shown: &str,
    key: i64,
    timeout: Duration,
) -> Result<(), FetchError> {
    write_message(io, request).map_err(|cause| match cause.raw_os_error() {
        // The sharer hung up after the handshake: it is shutting down.
        Some(code) if code == Errno::EPIPE as i32 || code == Errno::ECONNRESET as i32 => {
            FetchError::NotServed {
                address: shown.to_owned(),
                key,
            }
        }
        _ => io_failure(shown, timeout, FetchStage::Request, cause),
    })
}

/// A socket error at `stage`: a timeout when the deadline ran out.
fn io_failure(shown: &str, timeout: Duration, stage: FetchStage, cause: io::Error) -> FetchError {
    if is_timeout(&cause) {
        FetchError::TimedOut {
            address: shown.to_owned(),
            timeout,
            stage,
        }
    } else {
        FetchError::Io {
            address: shown.to_owned(),
            stage,
            cause,
        }
    }
}

fn connect(address: &[u8], shown: &str, key: i64) -> Result<UnixStream, FetchError> {
    let invalid = |reason| FetchError::InvalidAddress {
        address: shown.to_owned(),
        reason,
    };
    let socket_address = Address::from_bytes(address)
        .map_err(|error| {
            invalid(match error {
                ConnectionError::InvalidAddress { reason, .. } => reason,
                other => other.to_string(),
            })
        })?
        .to_socket_addr()
        .map_err(|error| invalid(error.to_string()))?;
    UnixStream::connect_addr(&socket_address).map_err(|cause| {
        if crate::connection::is_fd_exhaustion(&cause) {
            FetchError::TooManyOpenFiles {
                address: shown.to_owned(),
                key,
                stage: FetchStage::Connect,
            }
        } else if matches!(
            cause.kind(),
            ErrorKind::NotFound | ErrorKind::ConnectionRefused
        ) {
            FetchError::SharerGone {
                address: shown.to_owned(),
                cause,
            }
        } else {
            FetchError::Io {
                address: shown.to_owned(),
                stage: FetchStage::Connect,
                cause,
            }
        }
    })
}
