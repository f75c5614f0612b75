//! Passing fds over Unix sockets with `SCM_RIGHTS`.
//!
//! [`send_with_fds`] and [`recv_with_fds`] are the general calls: some bytes
//! plus some fds, borrowed on the way out ([`BorrowedFd`]) and owned on the
//! way in ([`OwnedFd`], close-on-exec), so no fd can leak or be closed twice.
//! [`recv_some`] is the lenient form for stream readers that must not lose
//! bytes when a peer attaches more fds than expected.
//!
//! [`send_fd_batch`] and [`recv_fd_batch`] speak CPython's convention, used
//! by `multiprocessing.reduction.sendfds` / `recvfds` and so by
//! `multiprocessing.resource_sharer` and PyTorch's `file_descriptor`
//! strategy: one message per batch whose single data byte is the number of
//! fds modulo 256.
//!
//! ```
//! use std::os::fd::AsFd;
//! use std::os::unix::net::UnixStream;
//! use tensorshare_strategies::platform::fd_passing::{recv_fd_batch, send_fd_batch};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (left, right) = UnixStream::pair()?;
//! let file = std::fs::File::open("/proc/self/exe")?;
//! send_fd_batch(left.as_fd(), &[file.as_fd()])?;
//! let received = recv_fd_batch(right.as_fd(), 1)?;
//! assert_eq!(received.len(), 1);
//! # Ok(())
//! # }
//! ```

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};

use nix::errno::Errno;

/// The most fds one message can carry on Linux (`SCM_MAX_FD`).
pub const MAX_FDS_PER_MESSAGE: usize = 253;

/// Why sending fds failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendFdsError {
    /// More fds than one message can carry.
    #[error(
        "cannot send {count} file descriptors in one message: at most {max} fit; send them in \
         batches",
        max = MAX_FDS_PER_MESSAGE
    )]
    TooManyFds {
        /// How many were given.
        count: usize,
    },
    /// Fds need at least one data byte to travel on a stream socket.
    #[error("cannot send file descriptors with no data: a stream socket needs at least one byte")]
    EmptyData,
    /// A batch must hold at least one fd.
    #[error("cannot send an empty batch of file descriptors: the receiver expects at least one")]
    NoFds,
    /// The peer closed the connection.
    #[error("cannot send file descriptors: the peer closed the connection ({errno})")]
    PeerClosed {
        /// `EPIPE` or `ECONNRESET`.
        errno: Errno,
    },
    /// `sendmsg` failed for another reason.
    #[error("sendmsg with file descriptors failed ({errno}): is the socket an AF_UNIX socket?")]
    Os {
        /// What `sendmsg` failed with.
        errno: Errno,
    },
}

/// Why receiving fds failed. Every fd that did arrive has been closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecvFdsError {
    /// The kernel could not deliver every fd: the receive buffer was too
    /// small for what the peer sent, or this process's fd table is full.
    #[error(
        "file descriptors were lost in transit ({arrived} arrived and were closed): the peer \
         sent more than expected, or too many open files here: raise `ulimit -n` or use the \
         file_system strategy"
    )]
    ControlTruncated {
        /// How many fds arrived before the truncation.
        arrived: usize,
    },
    /// More fds arrived than the caller accepts.
    #[error(
        "received {arrived} file descriptors where at most {max} were expected; all were closed: \
         the peer does not follow the protocol"
    )]
    TooManyFds {
        /// How many arrived.
        arrived: usize,
        /// How many the caller accepts.
        max: usize,
    },
    /// The batch's count byte does not match the fds that arrived.
    #[error(
        "the batch announces {announced} file descriptors (mod 256) but {arrived} arrived; all \
         were closed: the peer does not follow multiprocessing's sendfds protocol"
    )]
    BatchCountMismatch {
        /// The count byte.
        announced: u8,
        /// How many arrived.
        arrived: usize,
    },
    /// A batch arrived with no fds.
    #[error("expected file descriptors but the message carried none: the peer sent plain data")]
    MissingFds,
    /// The peer closed the connection before sending anything.
    #[error("the peer closed the connection before sending file descriptors")]
    EndOfStream,
    /// `recvmsg` failed.
    #[error("recvmsg for file descriptors failed ({errno}): is the socket an AF_UNIX socket?")]
    Os {
        /// What `recvmsg` failed with.
        errno: Errno,
    },
}

fn errno_of(err: rustix::io::Errno) -> Errno {
    Errno::from_raw(err.raw_os_error())
}

/// Sends `data` with `fds` attached, in one `sendmsg` call.
///
/// The fds are duplicated into the receiver when it receives; the caller
/// keeps its own. `SIGPIPE` is suppressed (`MSG_NOSIGNAL`): a closed peer is
/// an error. An interrupted call (`EINTR`) is retried.
///
/// Returns how many bytes of `data` were sent; on a stream socket that may be
/// fewer than `data.len()`: the fds travel with the first part, send the rest
/// without fds.
///
/// # Errors
///
/// [`SendFdsError::TooManyFds`] above [`MAX_FDS_PER_MESSAGE`],
/// [`SendFdsError::EmptyData`] for fds with no data, and the errno of
/// `sendmsg` ([`SendFdsError::PeerClosed`], [`SendFdsError::Os`]).
pub fn send_with_fds(
    socket: BorrowedFd<'_>,
    data: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<usize, SendFdsError> {
    if fds.len() > MAX_FDS_PER_MESSAGE {
        return Err(SendFdsError::TooManyFds { count: fds.len() });
    }
    if data.is_empty() && !fds.is_empty() {
        return Err(SendFdsError::EmptyData);
    }
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
    let mut control = if fds.is_empty() {
        SendAncillaryBuffer::default()
    } else {
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(fds)) {
            // The buffer is sized by cmsg_space! for exactly these fds.
            return Err(SendFdsError::Os {
                errno: Errno::ENOBUFS,
            });
        }
        control
    };
    let iov = [IoSlice::new(data)];
    loop {
        match sendmsg(socket, &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(sent) => return Ok(sent),
            Err(rustix::io::Errno::INTR) => continue,
            Err(err) => {
                let errno = errno_of(err);
                return Err(match errno {
                    Errno::EPIPE | Errno::ECONNRESET => SendFdsError::PeerClosed { errno },
                    _ => SendFdsError::Os { errno },
                });
            }
        }
    }
}

/// What one `recvmsg` brought: bytes, fds, and whether the kernel dropped
/// fds that did not fit.
#[derive(Debug)]
pub struct Received {
    /// How many bytes were written into the buffer; 0 at end of stream.
    pub bytes: usize,
    /// The fds that arrived, owned and close-on-exec.
    pub fds: Vec<OwnedFd>,
    /// The kernel dropped (and closed) fds that did not fit (`MSG_CTRUNC`):
    /// the peer sent more than asked for, or this process's fd table is full.
    pub fds_truncated: bool,
}

/// One `recvmsg` into `buf` with room for `max_fds` fds (capped at
/// [`MAX_FDS_PER_MESSAGE`]), close-on-exec (`MSG_CMSG_CLOEXEC`); an
/// interrupted call (`EINTR`) is retried.
///
/// Unlike [`recv_with_fds`] it reports fds lost to truncation instead of
/// failing, so the bytes that came with them are never lost: a stream reader
/// that must stay in step with its peer reads with this. A few more than
/// `max_fds` fds may arrive (alignment padding); the caller decides.
///
/// # Errors
///
/// [`RecvFdsError::Os`] with the errno of `recvmsg` (`EAGAIN` when a receive
/// timeout expires).
pub fn recv_some(
    socket: BorrowedFd<'_>,
    buf: &mut [u8],
    max_fds: usize,
) -> Result<Received, RecvFdsError> {
    // Room for the alignment `RecvAncillaryBuffer::new` may skip.
    const SPACE_MAX: usize =
        rustix::cmsg_space!(ScmRights(MAX_FDS_PER_MESSAGE)) + std::mem::align_of::<usize>();
    let max_fds = max_fds.min(MAX_FDS_PER_MESSAGE);
    let space_len = if max_fds == 0 {
        0
    } else {
        rustix::cmsg_space!(ScmRights(max_fds)) + std::mem::align_of::<usize>()
    };
    // On the stack: a kilobyte on the heap for every read made glibc
    // consolidate its free lists every message.
    let mut space = [MaybeUninit::<u8>::uninit(); SPACE_MAX];
    let space = space.get_mut(..space_len).unwrap_or_default();
    loop {
        let mut control = RecvAncillaryBuffer::new(space);
        let mut iov = [IoSliceMut::new(buf)];
        let received = match recvmsg(socket, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(received) => received,
            Err(rustix::io::Errno::INTR) => continue,
            Err(err) => {
                return Err(RecvFdsError::Os {
                    errno: errno_of(err),
                });
            }
        };
        let mut fds = Vec::new();
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(arrived) = message {
                fds.extend(arrived);
            }
        }
        return Ok(Received {
            bytes: received.bytes,
            fds,
            fds_truncated: received.flags.contains(ReturnFlags::CTRUNC),
        });
    }
}

/// Receives data into `buf` and up to `max_fds` fds (capped at
/// [`MAX_FDS_PER_MESSAGE`]), close-on-exec (`MSG_CMSG_CLOEXEC`).
///
/// Returns the number of bytes received and the fds. `(0, [])` means the
/// peer closed the connection. An interrupted call (`EINTR`) is retried.
///
/// # Errors
///
/// Every fd that arrived is closed before an error returns:
/// [`RecvFdsError::ControlTruncated`] when the kernel dropped fds (the peer
/// sent far more than `max_fds`, or this process's fd table is full),
/// [`RecvFdsError::TooManyFds`] when more than `max_fds` arrived, and
/// [`RecvFdsError::Os`] for the errno of `recvmsg`.
pub fn recv_with_fds(
    socket: BorrowedFd<'_>,
    buf: &mut [u8],
    max_fds: usize,
) -> Result<(usize, Vec<OwnedFd>), RecvFdsError> {
    let max_fds = max_fds.min(MAX_FDS_PER_MESSAGE);
    let received = recv_some(socket, buf, max_fds)?;
    // Returning drops `received.fds`, closing them, on every error path.
    if received.fds_truncated {
        return Err(RecvFdsError::ControlTruncated {
            arrived: received.fds.len(),
        });
    }
    if received.fds.len() > max_fds {
        return Err(RecvFdsError::TooManyFds {
            arrived: received.fds.len(),
            max: max_fds,
        });
    }
    Ok((received.bytes, received.fds))
}

/// Sends `fds` as one batch the way CPython's
/// `multiprocessing.reduction.sendfds(sock, fds)` does: a one-byte message,
/// `len(fds) % 256`, with the fds attached.
///
/// # Errors
///
/// [`SendFdsError::NoFds`] for an empty batch, else as [`send_with_fds`].
pub fn send_fd_batch(socket: BorrowedFd<'_>, fds: &[BorrowedFd<'_>]) -> Result<(), SendFdsError> {
    if fds.is_empty() {
        return Err(SendFdsError::NoFds);
    }
    let count_byte = u8::try_from(fds.len() % 256).unwrap_or(0);
    match send_with_fds(socket, &[count_byte], fds)? {
        1 => Ok(()),
        // A blocking stream socket sends at least one byte or fails; zero
        // means the socket cannot carry the batch.
        _ => Err(SendFdsError::Os {
            errno: Errno::EAGAIN,
        }),
    }
}

/// Receives one batch sent by [`send_fd_batch`] or CPython's
/// `multiprocessing.reduction.sendfds`, accepting at most `max_fds` fds.
///
/// Like CPython's `recvfds(sock, size)` it reads exactly one data byte, and
/// accepts the batch when the number of fds that arrived, modulo 256, equals
/// that byte.
///
/// # Errors
///
/// [`RecvFdsError::EndOfStream`] when the peer closed the connection,
/// [`RecvFdsError::MissingFds`] for a message without fds,
/// [`RecvFdsError::BatchCountMismatch`] when the byte disagrees, else as
/// [`recv_with_fds`]. Every fd that arrived is closed before an error
/// returns.
pub fn recv_fd_batch(socket: BorrowedFd<'_>, max_fds: usize) -> Result<Vec<OwnedFd>, RecvFdsError> {
    let mut count_byte = [0u8; 1];
    let (received, fds) = recv_with_fds(socket, &mut count_byte, max_fds)?;
    match (received, fds.is_empty()) {
        (0, true) => Err(RecvFdsError::EndOfStream),
        (_, true) => Err(RecvFdsError::MissingFds),
        _ if received == 1 && usize::from(count_byte[0]) == fds.len() % 256 => Ok(fds),
        _ => Err(RecvFdsError::BatchCountMismatch {
            announced: count_byte[0],
            arrived: fds.len(),
        }),
    }
}
