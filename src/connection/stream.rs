//! An authenticated connection, and the handshake that makes one.

use std::fmt;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::socket::{setsockopt, sockopt::SndBuf};
use tensorshare_compat::connection::{
    AuthError, MessageWriter, NegotiatedDigests, client_handshake, server_handshake,
};

use super::attached::AttachingWriter;
use super::deadline::DeadlineStream;
use super::receive::{KeptBuffer, PartialMessage};
use super::sent_registrations::{RegisteredFds, SentRegistrations};
use super::{Address, Authkey, ConnectionError, ConnectionOptions, StreamSocket};

/// One end of a `multiprocessing.connection` connection: length-framed
/// byte messages over a Unix or TCP stream socket ([`StreamSocket`]).
///
/// [`send_bytes`](Self::send_bytes) and [`recv_bytes`](Self::recv_bytes)
/// move the bytes of one message as they are; tensors and other Python
/// objects go over the [`Connection`](crate::Connection) of a
/// [`SharingContext`](crate::SharingContext) ([`Connection::new`](crate::Connection::new)
/// wraps this one).
///
/// Made by [`Listener::accept`](super::Listener::accept) and
/// [`Client::connect`](super::Client::connect) after the authkey handshake,
/// or by [`Connection::from_stream`] for a socket that needs none.
/// Reads are unbuffered (see the [module docs](super)); every send is
/// written out before it returns.
///
/// [`recv_bytes_into`](Self::recv_bytes_into) and the
/// [`Connection::recv`](crate::Connection::recv) over this one read each
/// message into a buffer kept for the next one (up to 256 MiB), so that a
/// stream of large messages does not pay for fresh memory every time;
/// [`recv_bytes`](Self::recv_bytes) hands its buffer over.
pub struct Connection {
    pub(super) stream: StreamSocket,
    pub(super) options: ConnectionOptions,
    /// The buffer of the last message, for the next one.
    pub(super) kept: KeptBuffer,
    /// What arrived of a message not yet whole, when the socket had no
    /// more for now: the next receive goes on with it.
    pub(super) partial: Option<PartialMessage>,
    /// The fds registered for messages sent here, closed if the peer dies
    /// without fetching them.
    pub(super) sent: SentRegistrations,
    /// The authkey the handshake proved the peer holds; `None` for a
    /// socket wrapped without one.
    authkey: Option<Authkey>,
    /// Whether the socket's send buffer is as large messages want it:
    /// raised once one is sent, and from the start on TCP, where a fixed
    /// `SO_SNDBUF` would turn off the kernel's autotuning.
    send_buffer_settled: bool,
    /// The TCP peer's address, looked up once, for errors about what it
    /// sent; `None` for a Unix socket.
    tcp_peer: Option<SocketAddr>,
}

/// Messages from this size on raise the socket's send buffer to
/// [`LARGE_SEND_BUFFER`] first.
const LARGE_MESSAGE_BYTES: usize = 1 << 20;

/// The send buffer asked for large messages (the kernel caps it at
/// `net.core.wmem_max`, 4 MiB by default, and doubles it for its own
/// bookkeeping). A Unix stream socket holds only what its sender's buffer
/// allows in flight; at the default 208 KiB a 64 MiB message takes
/// hundreds of sleeps and wake-ups on both sides, each a pair of context
/// switches, where 4 MiB takes tens.
const LARGE_SEND_BUFFER: usize = 4 << 20;

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("stream", &self.stream)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Wraps a connected socket without any handshake, e.g. one end of
    /// `UnixStream::pair()`, or a socket (Unix or TCP) authenticated
    /// elsewhere.
    pub fn from_stream(stream: impl Into<StreamSocket>, options: ConnectionOptions) -> Self {
        let stream = stream.into();
        Self {
            options,
            kept: KeptBuffer::default(),
            partial: None,
            sent: SentRegistrations::default(),
            authkey: None,
            send_buffer_settled: stream.is_tcp(),
            tcp_peer: stream.tcp_peer(),
            stream,
        }
    }

    /// The authkey this connection's handshake ran with, which its peer
    /// holds; `None` for a [`from_stream`](Self::from_stream) connection.
    pub fn authkey(&self) -> Option<&Authkey> {
        self.authkey.as_ref()
    }

    /// Sends one message: Python's `conn.send_bytes(payload)`. Send a pickle
    /// for Python's `conn.recv()`.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Send`] if the socket fails, the peer has gone, or
    /// a write timeout expires.
    pub fn send_bytes(&mut self, payload: &[u8]) -> Result<(), ConnectionError> {
        self.send_bytes_with_fds(payload, &[])
    }

    /// Sends one message with `fds` attached by `SCM_RIGHTS` (at most
    /// [`MAX_FDS_PER_MESSAGE`](tensorshare_strategies::platform::fd_passing::MAX_FDS_PER_MESSAGE)). The bytes on the wire are those of
    /// [`send_bytes`](Self::send_bytes); a reader that does not collect fds
    /// (any Python peer) gets the message, and its kernel closes the fds.
    ///
    /// # Errors
    ///
    /// As [`send_bytes`](Self::send_bytes); too many fds are a
    /// [`ConnectionError::Send`] of kind `InvalidInput`.
    pub fn send_bytes_with_fds(
        &mut self,
        payload: &[u8],
        fds: &[BorrowedFd<'_>],
    ) -> Result<(), ConnectionError> {
        self.send_slices_with_fds(&[IoSlice::new(payload)], fds)
    }

    /// Sends one message whose payload is `payload`'s slices back to back,
    /// written from where they are.
    pub(crate) fn send_slices_with_fds(
        &mut self,
        payload: &[IoSlice<'_>],
        fds: &[BorrowedFd<'_>],
    ) -> Result<(), ConnectionError> {
        let len: usize = payload.iter().map(|slice| slice.len()).sum();
        self.write_message(&mut MessageWriter::new(len), payload, fds)
            .map_err(|cause| ConnectionError::Send { len, cause })
    }

    /// Writes what is left of the message `progress` tracks, whose payload
    /// is `payload`'s slices and whose first bytes carry `fds`. On a
    /// non-blocking socket a `WouldBlock` error keeps the progress: call
    /// again with the same payload and fds when the socket has room.
    pub(crate) fn write_message(
        &mut self,
        progress: &mut MessageWriter,
        payload: &[IoSlice<'_>],
        fds: &[BorrowedFd<'_>],
    ) -> io::Result<()> {
        if progress.payload_len() >= LARGE_MESSAGE_BYTES && !self.send_buffer_settled {
            // Only ever a speed-up: a refusal leaves the default buffer.
            let _ = setsockopt(&self.stream, SndBuf, &LARGE_SEND_BUFFER);
            self.send_buffer_settled = true;
        }
        // The fds ride on the message's first bytes: once any went, so did they.
        let fds = if progress.is_started() { &[] } else { fds };
        let mut writer = AttachingWriter {
            stream: &self.stream,
            fds,
        };
        let sent = progress.write(&mut writer, payload);
        if sent
            .as_ref()
            .is_err_and(|e| e.kind() != io::ErrorKind::WouldBlock)
        {
            self.sent.withdraw_if_peer_exited();
        }
        sent
    }

    /// The pid of the process at the other end when it connected, if this
    /// pid namespace can name it; `None` over TCP.
    pub(crate) fn peer_pid(&mut self) -> Option<u32> {
        self.sent.peer(&self.stream)
    }

    /// Notes `keys`, registered with `holder` for the message about to be
    /// sent here: they are withdrawn if the peer dies without fetching them.
    pub(crate) fn note_sent(&mut self, holder: &Arc<dyn RegisteredFds>, keys: &[i64]) {
        self.sent.note(&self.stream, holder, keys);
    }

    /// Sets how long a receive may wait for data; `None` waits forever.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Io`] for a zero duration or a failing socket.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> Result<(), ConnectionError> {
        self.stream
            .set_read_timeout(timeout)
            .map_err(|e| ConnectionError::io("setting the connection's read timeout", e))
    }

    /// Sets how long a send may wait for the peer to read; `None` waits
    /// forever.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Io`] for a zero duration or a failing socket.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> Result<(), ConnectionError> {
        self.stream
            .set_write_timeout(timeout)
            .map_err(|e| ConnectionError::io("setting the connection's write timeout", e))
    }

    /// Another handle to the same socket, e.g. to send from one thread and
    /// receive in another.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Io`] when the descriptor cannot be duplicated.
    pub fn try_clone(&self) -> Result<Self, ConnectionError> {
        let stream = self
            .stream
            .try_clone()
            .map_err(|e| ConnectionError::io("duplicating the connection's socket", e))?;
        let mut clone = Self::from_stream(stream, self.options);
        clone.authkey.clone_from(&self.authkey);
        Ok(clone)
    }

    /// The socket itself: [`StreamSocket::into_unix`] gives the
    /// `UnixStream` of a local connection.
    pub fn into_stream(self) -> StreamSocket {
        self.stream
    }

    /// The socket, for calls this type does not wrap
    /// ([`StreamSocket::as_unix`], [`StreamSocket::as_tcp`]).
    pub fn stream(&self) -> &StreamSocket {
        &self.stream
    }

    /// The TCP peer's address as it was when the connection was made;
    /// `None` for a Unix socket.
    pub(crate) fn tcp_peer(&self) -> Option<SocketAddr> {
        self.tcp_peer
    }
}

impl AsFd for Connection {
    /// The socket, e.g. for `tensorshare_strategies::platform::fd_passing` between
    /// messages.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

/// Which side of the handshake we are.
#[derive(Clone, Copy)]
pub(crate) enum Role {
    /// `Listener.accept`: challenge first.
    Server,
    /// `Client`: answer first.
    Client,
}

/// Runs the handshake on `stream` within `options.handshake_timeout`, then
/// clears the socket's timeouts and makes the connection.
pub(crate) fn authenticate(
    stream: StreamSocket,
    role: Role,
    address: &Address,
    authkey: &Authkey,
    options: ConnectionOptions,
) -> Result<Connection, ConnectionError> {
    if let StreamSocket::Tcp(tcp) = &stream {
        super::socket::configure_tcp(tcp, &options)
            .map_err(|e| ConnectionError::io("setting the TCP connection's options", e))?;
    }
    let timeout = options.handshake_timeout;
    let mut bounded = DeadlineStream::new(&stream, timeout);
    let result: Result<NegotiatedDigests, AuthError> = match role {
        Role::Server => server_handshake(&mut bounded, authkey.as_bytes(), options.dialect),
        Role::Client => client_handshake(&mut bounded, authkey.as_bytes(), options.dialect),
    };
    result.map_err(|error| ConnectionError::from_handshake(address, timeout, error))?;
    let clear = |e| ConnectionError::io("clearing the socket timeouts after the handshake", e);
    stream.set_read_timeout(None).map_err(clear)?;
    stream.set_write_timeout(None).map_err(clear)?;
    let mut connection = Connection::from_stream(stream, options);
    connection.authkey = Some(authkey.clone());
    Ok(connection)
}
