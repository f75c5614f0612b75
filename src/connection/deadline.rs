//! A stream socket whose reads and writes all end by one deadline.
//!
//! The handshake and the framing read in several calls; a per-call socket
//! timeout alone would let a peer that trickles bytes hold a connection for
//! many timeouts. Each call here sets the socket timeout to what is left.

use std::io::{self, ErrorKind, Read, Write};
use std::time::{Duration, Instant};

use std::os::unix::net::UnixStream;

use super::StreamSocket;

/// A socket whose reads and writes time out: the connection's, or the
/// resource sharer's Unix stream.
pub(crate) trait TimedSocket {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
}

impl TimedSocket for UnixStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, timeout)
    }
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_write_timeout(self, timeout)
    }
}

impl TimedSocket for StreamSocket {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        StreamSocket::set_read_timeout(self, timeout)
    }
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        StreamSocket::set_write_timeout(self, timeout)
    }
}

/// A socket with an overall deadline.
pub(crate) struct DeadlineStream<'a, S = UnixStream> {
    stream: &'a S,
    /// `None` when the timeout is too long to represent: no deadline.
    deadline: Option<Instant>,
}

impl<'a, S: TimedSocket> DeadlineStream<'a, S> {
    /// Reads and writes on `stream` must finish within `timeout` from now.
    pub(crate) fn new(stream: &'a S, timeout: Duration) -> Self {
        Self {
            stream,
            deadline: Instant::now().checked_add(timeout),
        }
    }

    /// Time left (`None`: no deadline), or a `TimedOut` error when none is.
    fn remaining(&self) -> io::Result<Option<Duration>> {
        let Some(deadline) = self.deadline else {
            return Ok(None);
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(io::Error::new(ErrorKind::TimedOut, "the deadline passed"))
        } else {
            Ok(Some(left))
        }
    }

    /// Sets the socket's receive timeout to the time left, for calls that
    /// bypass `Read` (`recvmsg`).
    pub(crate) fn arm_read_timeout(&self) -> io::Result<()> {
        self.stream.set_read_timeout(self.remaining()?)
    }

    /// Sets the socket's send timeout to the time left, for calls that
    /// bypass `Write` (`sendmsg`).
    pub(crate) fn arm_write_timeout(&self) -> io::Result<()> {
        self.stream.set_write_timeout(self.remaining()?)
    }
}

impl<S: TimedSocket> Read for DeadlineStream<'_, S>
where
    for<'s> &'s S: Read,
{
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.arm_read_timeout()?;
        { self.stream }.read(buf)
    }
}

impl<S: TimedSocket> Write for DeadlineStream<'_, S>
where
    for<'s> &'s S: Write,
{
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm_write_timeout()?;
        { self.stream }.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
