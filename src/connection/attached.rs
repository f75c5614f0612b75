//! Messages with fds attached by `SCM_RIGHTS`, on the same framing.
//!
//! A tensorshare sender attaches each shared storage's fd to the message
//! that names it, so that a tensorshare receiver maps it at once instead of
//! fetching it from the sender's resource sharer (a connection, a handshake
//! and a round trip per storage). The bytes on the wire are unchanged:
//! CPython reads them with plain `read`, and the kernel closes fds that a
//! reader does not ask for, so a Python peer sees an ordinary message and
//! fetches through the resource sharer as always.
//!
//! On a stream socket the fds travel with the first bytes of the `sendmsg`
//! that carries them, and a `recvmsg` never reads past the bytes they came
//! with; the writer attaches them to the header's write, and the reader
//! collects whatever arrives while it reads one message.

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use tensorshare_strategies::platform::fd_passing::{
    MAX_FDS_PER_MESSAGE, RecvFdsError, SendFdsError, recv_some, send_with_fds,
};

use super::StreamSocket;

/// Writes to a stream, attaching `fds` to the first write.
pub(super) struct AttachingWriter<'a> {
    pub(super) stream: &'a StreamSocket,
    pub(super) fds: &'a [BorrowedFd<'a>],
}

impl Write for AttachingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.fds.is_empty() || buf.is_empty() {
            return { self.stream }.write(buf);
        }
        let sent = send_with_fds(self.stream.as_fd(), buf, self.fds).map_err(send_error)?;
        self.fds = &[];
        Ok(sent)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match bufs.iter().find(|buf| !buf.is_empty()) {
            Some(first) if !self.fds.is_empty() => self.write(first),
            _ => { self.stream }.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn send_error(error: SendFdsError) -> io::Error {
    match error {
        SendFdsError::PeerClosed { errno } | SendFdsError::Os { errno } => {
            io::Error::from_raw_os_error(errno as i32)
        }
        other => io::Error::new(io::ErrorKind::InvalidInput, other),
    }
}

/// The fds that arrived with one message, kept while it is read, in as
/// many reads as it takes.
///
/// Only the first read that returns bytes is a `recvmsg`: an attached
/// writer's fds travel with the first bytes it sends, and the kernel hands
/// them to the first read that takes any of those bytes. Later reads are
/// plain reads, and the kernel closes any fds a peer attached further on.
/// At most [`MAX_FDS_PER_MESSAGE`] fds are kept; if more arrive, or the
/// kernel drops some, the whole set is spoiled and closed: a receiver
/// cannot tell which storage a partial set belongs to.
#[derive(Default)]
pub(super) struct ArrivedFds {
    fds: Vec<OwnedFd>,
    spoiled: bool,
    started: bool,
}

impl ArrivedFds {
    /// The fds that arrived, unless some were lost or too many came.
    pub(super) fn into_fds(self) -> Vec<OwnedFd> {
        if self.spoiled { Vec::new() } else { self.fds }
    }
}

/// Reads a message from a stream, keeping in `arrived` the fds that come
/// with its first bytes.
pub(super) struct CollectingReader<'a> {
    pub(super) stream: &'a StreamSocket,
    pub(super) arrived: &'a mut ArrivedFds,
}

impl Read for CollectingReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Nothing rides on a TCP stream's bytes: no `recvmsg` for it.
        if self.arrived.started || self.stream.is_tcp() {
            return { self.stream }.read(buf);
        }
        let received = recv_some(self.stream.as_fd(), buf, MAX_FDS_PER_MESSAGE).map_err(
            |error| match error {
                RecvFdsError::Os { errno } => io::Error::from_raw_os_error(errno as i32),
                other => io::Error::other(other),
            },
        )?;
        let arrived = &mut *self.arrived;
        arrived.started = received.bytes > 0;
        arrived.spoiled = received.fds_truncated || received.fds.len() > MAX_FDS_PER_MESSAGE;
        if !arrived.spoiled {
            arrived.fds = received.fds;
        }
        Ok(received.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorshare_compat::connection::{read_message, write_message};

    #[test]
    fn fds_ride_with_the_message_and_plain_readers_see_only_bytes() {
        let (left, right) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let (left, right) = (StreamSocket::from(left), StreamSocket::from(right));
        let file = std::fs::File::open("/proc/self/exe").expect("open");
        let fds = [file.as_fd()];
        let mut writer = AttachingWriter {
            stream: &left,
            fds: &fds,
        };
        write_message(&mut writer, b"first").expect("write");
        write_message(&mut &left, b"second").expect("write");

        for (message, fds) in [(&b"first"[..], 1), (b"second", 0)] {
            let mut arrived = ArrivedFds::default();
            let mut reader = CollectingReader {
                stream: &right,
                arrived: &mut arrived,
            };
            assert_eq!(read_message(&mut reader, 64).expect("read"), message);
            assert_eq!(arrived.into_fds().len(), fds);
        }

        // A reader that does not ask for fds gets the same bytes.
        let mut writer = AttachingWriter {
            stream: &left,
            fds: &fds,
        };
        write_message(&mut writer, b"third").expect("write");
        assert_eq!(read_message(&mut &right, 64).expect("read"), b"third");
    }
}
