//! A socket's readiness from tokio's reactor, registered soundly.
//!
//! tokio registers a descriptor by number, and its registration is sound
//! only while that number stays open on the same file (`AsyncFd::register`
//! is `unsafe`). The socket's owner is free to close or replace it, so what
//! is registered here is a duplicate, owned by the registration alone: it
//! stays open until the registration drops, and reports the readiness of
//! the same open socket (`epoll` watches the file, not the number).
//!
//! # Safety
//!
//! [`Readiness::new`]'s one `unsafe` call registers a descriptor that the
//! registration owns and never gives out: it cannot be closed or reused
//! while registered.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::task::{Context, Poll};

use tokio::io::Interest;
use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};

/// The readiness of one socket, registered with the reactor of the tokio
/// runtime it was made in.
#[derive(Debug)]
pub struct Readiness(AsyncFd<OwnedFd>);

/// What [`Readiness`] waits gives back: clear it when the socket said
/// `WouldBlock`, so that the next wait waits for the reactor.
pub type ReadyGuard<'a> = AsyncFdReadyGuard<'a, OwnedFd>;

impl Readiness {
    /// Registers a duplicate of `socket` for `interest`. The socket must be
    /// non-blocking for its readers to see `WouldBlock`.
    ///
    /// # Errors
    ///
    /// When called outside a tokio runtime (kind `Other`), when the fd
    /// cannot be duplicated, or when the reactor refuses it.
    #[allow(unsafe_code)]
    pub fn new(socket: BorrowedFd<'_>, interest: Interest) -> io::Result<Self> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(io::Error::other(
                "not inside a tokio runtime: make async connections and listeners from a task \
                 or a runtime's block_on",
            ));
        }
        let fd = socket.try_clone_to_owned()?;
        // SAFETY: `fd` is moved into the `AsyncFd`, which alone owns it
        // until it is dropped: nothing else can close it or make its
        // number name another file meanwhile, and `OwnedFd::as_raw_fd`
        // always returns that number.
        let registered = unsafe { AsyncFd::register_with_interest(fd, interest) };
        registered.map(Self).map_err(|error| error.into_parts().1)
    }

    /// Waits until the socket may be read.
    ///
    /// # Errors
    ///
    /// When the reactor has shut down.
    pub async fn readable(&self) -> io::Result<ReadyGuard<'_>> {
        self.0.readable().await
    }

    /// Waits until the socket may be written.
    ///
    /// # Errors
    ///
    /// When the reactor has shut down.
    pub async fn writable(&self) -> io::Result<ReadyGuard<'_>> {
        self.0.writable().await
    }

    /// Polls for the socket to be readable.
    ///
    /// # Errors
    ///
    /// When the reactor has shut down.
    pub fn poll_read_ready<'a>(&'a self, cx: &mut Context<'_>) -> Poll<io::Result<ReadyGuard<'a>>> {
        self.0.poll_read_ready(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    use super::*;

    #[test]
    fn outside_a_runtime_registration_is_refused_not_a_panic() {
        let (socket, _peer) = UnixStream::pair().expect("a socket pair");
        let error = Readiness::new(socket.as_fd(), Interest::READABLE).expect_err("no runtime");
        assert!(error.to_string().contains("tokio runtime"), "{error}");
    }

    #[test]
    fn the_duplicate_reports_the_sockets_readiness_and_outlives_it() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let (socket, mut peer) = UnixStream::pair().expect("a socket pair");
            socket.set_nonblocking(true).expect("non-blocking");
            let readiness = Readiness::new(socket.as_fd(), Interest::READABLE).expect("registered");
            peer.write_all(b"x").expect("written");
            let guard = readiness.readable().await.expect("readable");
            assert!(guard.ready().is_readable());
            drop(guard);
            // The socket's owner closes it; the registration keeps its own.
            drop(socket);
            drop(readiness);
        });
    }
}
