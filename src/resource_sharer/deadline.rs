//! A Unix stream whose reads and writes all end by one deadline.
//!
//! The handshake and the framing read in several calls; a per-call socket
//! timeout alone would let a peer that trickles bytes hold a connection for
//! many timeouts. Each call here sets the socket timeout to what is left.

use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// `&UnixStream` with an overall deadline.
pub(crate) struct DeadlineStream<'a> {
    stream: &'a UnixStream,
    deadline: Instant,
}

impl<'a> DeadlineStream<'a> {
    /// Reads and writes on `stream` must finish within `timeout` from now.
    pub(crate) fn new(stream: &'a UnixStream, timeout: Duration) -> Self {
        let now = Instant::now();
        Self {
            stream,
            // A timeout too large for `Instant` is as good as a day.
            deadline: now
                .checked_add(timeout)
                .or_else(|| now.checked_add(Duration::from_secs(86_400)))
                .unwrap_or(now),
        }
    }

    /// Time left, or a `TimedOut` error when none is.
    pub(crate) fn remaining(&self) -> io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(io::Error::new(ErrorKind::TimedOut, "deadline passed"))
        } else {
            Ok(left)
        }
    }

    /// Sets the socket's receive timeout to the time left, for calls that
    /// bypass `Read` (`recvmsg`).
    pub(crate) fn arm_read_timeout(&self) -> io::Result<()> {
        self.stream.set_read_timeout(Some(self.remaining()?))
    }

    /// Sets the socket's send timeout to the time left, for calls that
    /// bypass `Write` (`sendmsg`).
    pub(crate) fn arm_write_timeout(&self) -> io::Result<()> {
        self.stream.set_write_timeout(Some(self.remaining()?))
    }
}

impl Read for DeadlineStream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.arm_read_timeout()?;
        self.stream.read(buf)
    }
}

impl Write for DeadlineStream<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm_write_timeout()?;
        self.stream.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Whether an I/O error means a socket timeout or the deadline ran out.
pub(crate) fn is_timeout(error: &io::Error) -> bool {
    matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}
