//! A listener whose accepts are futures, handshakes run side by side.

use std::future::poll_fn;
use std::task::{Context, Poll, ready};

use std::os::fd::AsFd;

use tensorshare_strategies::platform::readiness::Readiness;
use tokio::io::Interest;
use tokio::task::JoinSet;

use super::{Connection, joined, runtime_error};
use crate::Error;
use crate::connection::{self, Address, ConnectionError};
use crate::sharing::SharingContext;

/// Handshakes run at once at most: more peers wait in the kernel's backlog
/// until one finishes. Each holds a thread of the blocking pool for at most
/// the handshake timeout.
const MAX_HANDSHAKES: usize = 64;

/// A [`crate::Listener`] whose [`accept`](Self::accept) waits on tokio's
/// reactor, each peer's handshake on the blocking pool beside the others'.
pub struct Listener {
    inner: crate::Listener,
    readiness: Readiness,
    handshakes: JoinSet<Result<connection::Connection, ConnectionError>>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("address", self.address())
            .field("handshakes", &self.handshakes.len())
            .finish()
    }
}

impl Listener {
    /// `listener` (from [`SharingContext::listen`] or
    /// [`listen_in_private_dir`](SharingContext::listen_in_private_dir)),
    /// waited on by the reactor of the runtime this is called in.
    ///
    /// # Errors
    ///
    /// [`Error::Connection`] when called outside a tokio runtime, or when
    /// the socket cannot be made non-blocking or registered.
    pub fn new(listener: crate::Listener) -> Result<Self, Error> {
        listener.get_ref().set_nonblocking(true)?;
        let readiness = Readiness::new(listener.as_fd(), Interest::READABLE)
            .map_err(|e| runtime_error("registering the listener with the tokio runtime", e))?;
        Ok(Self {
            inner: listener,
            readiness,
            handshakes: JoinSet::new(),
        })
    }

    /// Where peers connect.
    pub fn address(&self) -> &Address {
        self.inner.address()
    }

    /// The context accepted connections go through.
    pub fn sharing(&self) -> &SharingContext {
        self.inner.sharing()
    }

    /// The next peer that completed the authkey handshake, as
    /// [`crate::Listener::accept`] gives it.
    ///
    /// # Errors
    ///
    /// As [`crate::Listener::accept`]: [`Error::is_handshake_failure`] says
    /// only that peer failed, and a server accepts the next.
    pub async fn accept(&mut self) -> Result<Connection, Error> {
        let accepted = poll_fn(|cx| self.poll_accept(cx)).await?;
        Connection::new(crate::Connection::new(accepted, self.sharing())?)
    }

    /// Starts the handshake of every peer waiting (up to
    /// [`MAX_HANDSHAKES`] at once), and gives the first that finished.
    fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<Result<connection::Connection, Error>> {
        loop {
            if let Poll::Ready(Some(done)) = self.handshakes.poll_join_next(cx) {
                return Poll::Ready(joined(done, "a handshake")?.map_err(Error::from));
            }
            if self.handshakes.len() >= MAX_HANDSHAKES {
                return Poll::Pending;
            }
            let mut guard = ready!(self.readiness.poll_read_ready(cx))
                .map_err(|e| runtime_error("waiting for a peer", e))?;
            match self.inner.get_ref().accept_unauthenticated() {
                Ok(incoming) => {
                    self.handshakes
                        .spawn_blocking(move || incoming.authenticate());
                }
                Err(error) if error.is_would_block() => guard.clear_ready(),
                Err(error) => return Poll::Ready(Err(error.into())),
            }
        }
    }
}
