//! The socket under a connection: a Unix stream or a TCP stream.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use nix::sys::socket::setsockopt;
use nix::sys::socket::sockopt::{KeepAlive, TcpKeepCount, TcpKeepIdle, TcpKeepInterval};

use super::ConnectionOptions;

/// A connected stream socket, owned: the `AF_UNIX` socket of a local
/// connection or the TCP socket of one that may cross hosts.
///
/// [`Connection::from_stream`](super::Connection::from_stream) takes either
/// (`UnixStream` and `TcpStream` convert into this);
/// [`Connection::stream`](super::Connection::stream) and
/// [`Connection::into_stream`](super::Connection::into_stream) give it back.
/// It reads and writes as the socket itself does.
///
/// # Examples
///
/// ```
/// use std::os::unix::net::UnixStream;
///
/// use tensorshare::connection::{Connection, ConnectionOptions, StreamSocket};
///
/// let (ours, _theirs) = UnixStream::pair()?;
/// let connection = Connection::from_stream(ours, ConnectionOptions::default());
/// assert!(!connection.stream().is_tcp());
/// let unix: UnixStream = connection.into_stream().into_unix().expect("a Unix socket");
/// # drop(unix);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub enum StreamSocket {
    /// An `AF_UNIX` stream: a peer on this machine, which fds can reach.
    Unix(UnixStream),
    /// A TCP stream: a peer anywhere; only bytes reach it.
    Tcp(TcpStream),
}

impl StreamSocket {
    /// Whether this is a TCP socket.
    pub fn is_tcp(&self) -> bool {
        matches!(self, Self::Tcp(_))
    }

    /// The Unix socket, if this is one.
    pub fn as_unix(&self) -> Option<&UnixStream> {
        match self {
            Self::Unix(stream) => Some(stream),
            Self::Tcp(_) => None,
        }
    }

    /// The TCP socket, if this is one.
    pub fn as_tcp(&self) -> Option<&TcpStream> {
        match self {
            Self::Tcp(stream) => Some(stream),
            Self::Unix(_) => None,
        }
    }

    /// The Unix socket itself, if this is one.
    pub fn into_unix(self) -> Option<UnixStream> {
        match self {
            Self::Unix(stream) => Some(stream),
            Self::Tcp(_) => None,
        }
    }

    /// The TCP socket itself, if this is one.
    pub fn into_tcp(self) -> Option<TcpStream> {
        match self {
            Self::Tcp(stream) => Some(stream),
            Self::Unix(_) => None,
        }
    }

    /// The TCP peer's address; `None` for a Unix socket or a TCP socket
    /// no longer connected.
    pub(crate) fn tcp_peer(&self) -> Option<SocketAddr> {
        self.as_tcp()?.peer_addr().ok()
    }

    /// Another handle to the same socket.
    ///
    /// # Errors
    ///
    /// When the descriptor cannot be duplicated.
    pub(crate) fn try_clone(&self) -> io::Result<Self> {
        match self {
            Self::Unix(stream) => stream.try_clone().map(Self::Unix),
            Self::Tcp(stream) => stream.try_clone().map(Self::Tcp),
        }
    }

    /// Makes reads and writes fail with `WouldBlock` instead of waiting.
    #[cfg(feature = "tokio")]
    pub(crate) fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        match self {
            Self::Unix(stream) => stream.set_nonblocking(nonblocking),
            Self::Tcp(stream) => stream.set_nonblocking(nonblocking),
        }
    }

    /// Sets the receive timeout (`SO_RCVTIMEO`); `None` waits forever.
    ///
    /// # Errors
    ///
    /// For a zero duration or a failing socket.
    pub(crate) fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Self::Unix(stream) => stream.set_read_timeout(timeout),
            Self::Tcp(stream) => stream.set_read_timeout(timeout),
        }
    }

    /// Sets the send timeout (`SO_SNDTIMEO`); `None` waits forever.
    ///
    /// # Errors
    ///
    /// For a zero duration or a failing socket.
    pub(crate) fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Self::Unix(stream) => stream.set_write_timeout(timeout),
            Self::Tcp(stream) => stream.set_write_timeout(timeout),
        }
    }
}

impl From<UnixStream> for StreamSocket {
    fn from(stream: UnixStream) -> Self {
        Self::Unix(stream)
    }
}

impl From<TcpStream> for StreamSocket {
    fn from(stream: TcpStream) -> Self {
        Self::Tcp(stream)
    }
}

impl AsFd for StreamSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Self::Unix(stream) => stream.as_fd(),
            Self::Tcp(stream) => stream.as_fd(),
        }
    }
}

impl Read for &StreamSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            StreamSocket::Unix(stream) => (&*stream).read(buf),
            StreamSocket::Tcp(stream) => (&*stream).read(buf),
        }
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        match self {
            StreamSocket::Unix(stream) => (&*stream).read_vectored(bufs),
            StreamSocket::Tcp(stream) => (&*stream).read_vectored(bufs),
        }
    }
}

impl Write for &StreamSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            StreamSocket::Unix(stream) => (&*stream).write(buf),
            StreamSocket::Tcp(stream) => (&*stream).write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            StreamSocket::Unix(stream) => (&*stream).write_vectored(bufs),
            StreamSocket::Tcp(stream) => (&*stream).write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for StreamSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

impl Write for StreamSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (&*self).write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Keepalive probes a vanished TCP peer is given before the connection
/// fails.
const KEEPALIVE_PROBES: u32 = 8;

/// Sets what `options` asks of a TCP connection: `TCP_NODELAY`, and the
/// keepalive of
/// [`tcp_dead_peer_timeout`](ConnectionOptions::with_tcp_dead_peer_timeout).
///
/// No `TCP_USER_TIMEOUT`: it also aborts a connection whose live peer
/// keeps a zero window for that long (a reader busy for a while), as
/// `tests/tcp.rs` shows.
pub(super) fn configure_tcp(stream: &TcpStream, options: &ConnectionOptions) -> io::Result<()> {
    if options.tcp_nodelay {
        stream.set_nodelay(true)?;
    }
    let Some(timeout) = options.tcp_dead_peer_timeout else {
        return Ok(());
    };
    let secs = |d: Duration| u32::try_from(d.as_secs()).unwrap_or(u32::MAX).max(1);
    let idle = secs(timeout / 3);
    let interval = secs(timeout.saturating_sub(timeout / 3) / KEEPALIVE_PROBES);
    setsockopt(stream, KeepAlive, &true)?;
    setsockopt(stream, TcpKeepIdle, &idle)?;
    setsockopt(stream, TcpKeepInterval, &interval)?;
    setsockopt(stream, TcpKeepCount, &KEEPALIVE_PROBES)?;
    Ok(())
}
