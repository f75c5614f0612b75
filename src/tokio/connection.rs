//! A connection of values whose sends and receives are futures.

use std::io::{self, IoSlice};
use std::os::fd::AsFd;

use tensorshare_compat::connection::MessageWriter;
use tensorshare_strategies::platform::readiness::Readiness;
use tokio::io::Interest;
use tokio::task::JoinHandle;

use super::{joined, runtime_error};
use crate::Error;
use crate::connection::{Address, ConnectionError};
use crate::messages::{connection_failed, rebuild};
use crate::model::Value;
use crate::sharing::{Outgoing, SharingContext};

/// A [`crate::Connection`] whose [`send`](Self::send) and
/// [`recv`](Self::recv) wait on tokio's reactor: what torch's
/// `conn.send(obj)` and `conn.recv()` do, for a task.
///
/// Made by [`Connection::connect`], by [`Listener::accept`](super::Listener::accept),
/// or from a blocking connection by [`Connection::new`]. See the
/// [module docs](super) for what its futures keep when they are dropped.
pub struct Connection {
    inner: crate::Connection,
    readiness: Readiness,
    /// The message being written: the rest goes before anything else.
    sending: Option<Sending>,
    /// The message being rebuilt on the blocking pool.
    rebuilding: Option<JoinHandle<Result<Value, Error>>>,
}

/// A staged message and how much of it the socket has taken.
struct Sending {
    outgoing: Outgoing,
    progress: MessageWriter,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("inner", &self.inner)
            .field("sending", &self.sending.is_some())
            .field("rebuilding", &self.rebuilding.is_some())
            .finish()
    }
}

impl Connection {
    /// `connection`, waited on by the reactor of the runtime this is
    /// called in.
    ///
    /// # Errors
    ///
    /// [`Error::Connection`] when called outside a tokio runtime, or when
    /// the socket cannot be made non-blocking or registered.
    pub fn new(connection: crate::Connection) -> Result<Self, Error> {
        connection
            .get_ref()
            .stream()
            .set_nonblocking(true)
            .map_err(|e| runtime_error("making the connection's socket non-blocking", e))?;
        let readiness = Readiness::new(
            connection.get_ref().as_fd(),
            Interest::READABLE | Interest::WRITABLE,
        )
        .map_err(|e| runtime_error("registering the connection with the tokio runtime", e))?;
        Ok(Self {
            inner: connection,
            readiness,
            sending: None,
            rebuilding: None,
        })
    }

    /// Connects to the listener at `address` (a Unix socket, or `host:port`
    /// over TCP) as [`SharingContext::connect`] does, the handshake on the
    /// blocking pool.
    ///
    /// # Errors
    ///
    /// As [`SharingContext::connect`] and [`Connection::new`].
    pub async fn connect(sharing: &SharingContext, address: &Address) -> Result<Self, Error> {
        let (sharing, address) = (sharing.clone(), address.clone());
        let connected = tokio::task::spawn_blocking(move || sharing.connect(&address)).await;
        Self::new(joined(connected, "connecting")??)
    }

    /// Sends `value` as [`crate::Connection::send`] does, waiting for room
    /// in the socket on the reactor; returns once the whole message is
    /// written.
    ///
    /// A message a dropped `send` had begun to write goes first, whole.
    ///
    /// # Errors
    ///
    /// As [`crate::Connection::send`].
    pub async fn send(&mut self, value: &Value) -> Result<(), Error> {
        self.flush().await?;
        let outgoing = self.inner.stage(value)?;
        self.sending = Some(Sending {
            progress: MessageWriter::new(outgoing.pickle().len()),
            outgoing,
        });
        self.flush().await
    }

    /// Writes the rest of a message whose [`send`](Self::send) was dropped
    /// before it finished; nothing to do when there is none.
    ///
    /// # Errors
    ///
    /// [`Error::Connection`] when the socket fails or the peer has gone:
    /// the message is then dropped, and the connection is out of step.
    pub async fn flush(&mut self) -> Result<(), Error> {
        while let Some(sending) = &mut self.sending {
            let mut guard = self
                .readiness
                .writable()
                .await
                .map_err(|e| runtime_error("waiting for room in the socket", e))?;
            let connection = &mut self.inner;
            let payload: Vec<IoSlice<'_>> = sending.outgoing.pickle().io_slices();
            let fds = sending.outgoing.attached_fds();
            let written = connection
                .get_mut()
                .write_message(&mut sending.progress, &payload, &fds);
            match written {
                Ok(()) => self.sending = None,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                Err(cause) => {
                    let error = connection_failed(
                        connection.sharing(),
                        ConnectionError::Send {
                            len: sending.progress.payload_len(),
                            cause,
                        },
                    );
                    self.sending = None;
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    /// Receives one message as [`crate::Connection::recv`] does, waiting
    /// for it on the reactor; the rebuild runs on the blocking pool.
    ///
    /// # Errors
    ///
    /// As [`crate::Connection::recv`]; [`Error::is_closed`] tells a peer
    /// that closed the connection between messages.
    pub async fn recv(&mut self) -> Result<Value, Error> {
        loop {
            if let Some(rebuilding) = &mut self.rebuilding {
                let rebuilt = rebuilding.await;
                self.rebuilding = None;
                return joined(rebuilt, "rebuilding a message")?;
            }
            let mut guard = self
                .readiness
                .readable()
                .await
                .map_err(|e| runtime_error("waiting for a message", e))?;
            let connection = &mut self.inner;
            match connection.recv_message() {
                Ok(message) => {
                    let sharing = connection.sharing().clone();
                    let origin = connection.origin();
                    self.rebuilding = Some(tokio::task::spawn_blocking(move || {
                        rebuild(&sharing, message, origin)
                    }));
                }
                Err(Error::Connection(ConnectionError::ReadTimeout)) => guard.clear_ready(),
                Err(error) => return Err(error),
            }
        }
    }

    /// The context messages go through.
    pub fn sharing(&self) -> &SharingContext {
        self.inner.sharing()
    }

    /// The blocking connection underneath, for its byte level.
    pub fn get_ref(&self) -> &crate::Connection {
        &self.inner
    }
}
