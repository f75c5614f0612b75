//! The socket under a connection: a Unix stream or a TCP stream.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::tcp_address::is_loopback;

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
/// use tensorshare::connection::{ConnectionOptions, StreamSocket};
/// use tensorshare::Connection;
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
    pub fn tcp_peer(&self) -> Option<SocketAddr> {
        self.as_tcp()?.peer_addr().ok()
    }

    /// Whether the peer is in another host's reach: a TCP peer whose
    /// address is not a loopback address (or one that can no longer be
    /// told). `false` for a Unix socket.
    pub fn peer_may_be_remote(&self) -> bool {
        self.is_tcp() && !self.tcp_peer().is_some_and(|peer| is_loopback(peer.ip()))
    }

    /// Another handle to the same socket.
    ///
    /// # Errors
    ///
    /// When the descriptor cannot be duplicated.
    pub fn try_clone(&self) -> io::Result<Self> {
        match self {
            Self::Unix(stream) => stream.try_clone().map(Self::Unix),
            Self::Tcp(stream) => stream.try_clone().map(Self::Tcp),
        }
    }

    /// Sets the receive timeout (`SO_RCVTIMEO`); `None` waits forever.
    ///
    /// # Errors
    ///
    /// For a zero duration or a failing socket.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
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
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Self::Unix(stream) => stream.set_write_timeout(timeout),
            Self::Tcp(stream) => stream.set_write_timeout(timeout),
        }
    }

    /// Shuts down reading, writing or both.
    ///
    /// # Errors
    ///
    /// When the socket is not connected.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Self::Unix(stream) => stream.shutdown(how),
            Self::Tcp(stream) => stream.shutdown(how),
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
