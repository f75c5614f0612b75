//! A connection whose messages are values, shared and attached through
//! the context it was made with.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use crate::Error;
use crate::connection::{self, ConnectionError, ReceivedMessage, RegisteredFds};
use crate::model::Value;
use crate::sharing::{MessageOrigin, Outgoing, SharingContext};

/// A connection to a peer (a torch process's `multiprocessing.connection`
/// end, or another tensorshare one) that sends and receives values as
/// torch's `conn.send(obj)` and `conn.recv()` do, through the
/// [`SharingContext`] it was made with.
///
/// Made by [`SharingContext::connect`], by [`Listener::accept`](crate::Listener::accept)
/// of a [`SharingContext::listen`]er, or from a byte-level
/// [`connection::Connection`] by [`Connection::new`]. The byte level stays
/// reachable ([`get_ref`](Self::get_ref), [`get_mut`](Self::get_mut),
/// [`into_inner`](Self::into_inner)) for `send_bytes`, timeouts and the like.
///
/// # Examples
///
/// Both ends in one process, on a socket pair:
///
/// ```
/// use std::os::unix::net::UnixStream;
///
/// use tensorshare::connection::{self, ConnectionOptions};
/// use tensorshare::{Authkey, Connection, Dict, SharingContext, Tensor};
///
/// let sharing = SharingContext::new(Authkey::random()?);
/// let (ours, theirs) = UnixStream::pair().expect("a socket pair");
/// let options = ConnectionOptions::default();
/// let mut sender = Connection::new(connection::Connection::from_stream(ours, options), &sharing)?;
/// let mut receiver =
///     Connection::new(connection::Connection::from_stream(theirs, options), &sharing)?;
///
/// let scores = Tensor::from_slice(&sharing, &[0.25f64, 0.75], &[2])?;
/// sender.send(&Dict::new().with("scores", &scores).with("model", "resnet18").into())?;
///
/// let received = receiver.recv()?;
/// assert_eq!(received.try_get::<&str>("model")?, "resnet18");
/// assert_eq!(received.try_get::<&Tensor>("scores")?, &scores);
/// # Ok::<(), tensorshare::Error>(())
/// ```
#[derive(Debug)]
pub struct Connection {
    inner: connection::Connection,
    sharing: SharingContext,
}

impl Connection {
    /// `connection`'s messages as values shared through `sharing`.
    ///
    /// # Errors
    ///
    /// [`Error::AuthkeyMismatch`] when the connection's handshake ran with
    /// another key than `sharing`'s: its peer could fetch none of the
    /// storages sent, nor this process any of the peer's.
    pub fn new(
        connection: connection::Connection,
        sharing: &SharingContext,
    ) -> Result<Self, Error> {
        match connection.authkey() {
            Some(key) if key != sharing.authkey() => Err(Error::AuthkeyMismatch),
            _ => Ok(Self {
                inner: connection,
                sharing: sharing.clone(),
            }),
        }
    }

    /// Sends `value` as Python's `conn.send(value)` would from a torch
    /// process: pickled by the connection's context, storages shared with
    /// its strategy.
    ///
    /// A Rust struct goes as the dict torch code expects through
    /// [`to_value`](crate::to_value): `connection.send(&to_value(&batch)?)`.
    ///
    /// The fds of shared storages also ride on the message itself (see
    /// [`SharingContext::with_inline_fds`]); Python peers ignore them.
    ///
    /// Over a TCP connection ([`StreamSocket::is_tcp`](crate::connection::StreamSocket::is_tcp)) every
    /// storage goes as `bytes`, inline, whatever the context's strategy,
    /// since shared memory does not reach another host; unless the strategy
    /// is [pinned](SharingContext::with_pinned_strategy) to one that shares
    /// memory, which is then an error ([`Error::PinnedStrategyOverTcp`]).
    ///
    /// The fds registered for the message wait for the peer to fetch them
    /// for their [unfetched lifetime](SharingContext::with_unfetched_lifetime),
    /// or until the connection ends with its peer process exited: a process
    /// that died reading the connection fetches nothing more, and they are
    /// closed then.
    ///
    /// # What the sender keeps alive
    ///
    /// Under `file_descriptor` a receiver fetches each storage's fd from
    /// this process's resource sharer while it unpickles the message: this
    /// process must still run then. Call
    /// [`SharingContext::wait_until_fetched`] before exiting. The other
    /// strategies' rules are in the [crate docs](crate#what-a-sender-keeps-alive).
    ///
    /// # Errors
    ///
    /// When a storage cannot be shared; [`Error::Connection`] when the send
    /// fails, or [`Error::PeerAuthkey`] when it fails after a peer failed
    /// to authenticate to this process's resource sharer.
    pub fn send(&mut self, value: &Value) -> Result<(), Error> {
        let outgoing = self.stage(value)?;
        let payload = outgoing.pickle().io_slices();
        self.inner
            .send_slices_with_fds(&payload, &outgoing.attached_fds())
            .map_err(|error| connection_failed(&self.sharing, error))
    }

    /// Pickles `value` for this connection and shares its storages, noting
    /// the fds registered for it: the message, ready to write.
    pub(crate) fn stage(&mut self, value: &Value) -> Result<Outgoing, Error> {
        let sharing = &self.sharing;
        let receiver = self.inner.peer_pid();
        let outgoing = sharing.dumps_outgoing(value, self.inner.stream().is_tcp(), receiver)?;
        let keys = outgoing.registered_keys();
        if !keys.is_empty() {
            // Registered keys mean the sharer has started.
            if let Ok(sharer) = sharing.resource_sharer() {
                let holder: Arc<dyn RegisteredFds> = sharer.clone();
                self.inner.note_sent(&holder, keys);
            }
        }
        Ok(outgoing)
    }

    /// Receives one message as Python's `conn.recv()` would in a torch
    /// process: rebuilt by the connection's context, shared storages
    /// attached.
    ///
    /// Read a dict into a Rust struct with [`from_value`](crate::from_value):
    /// `let batch: Batch = from_value(&connection.recv()?)?`.
    ///
    /// # Errors
    ///
    /// [`Error::Connection`] when receiving fails (see
    /// [`recv_bytes`](connection::Connection::recv_bytes)), or
    /// [`Error::PeerAuthkey`] when it fails after a peer failed to
    /// authenticate to this process's resource sharer; any error of
    /// [`SharingContext::loads`]. [`Error::is_closed`] tells a peer that
    /// closed the connection between messages. On a TCP connection, a
    /// storage named by a shared-memory handle is refused with
    /// [`Error::SharedMemoryOverTcp`] (inside [`Error::Attach`]), whose
    /// message tells the sender to send bytes.
    ///
    /// # Examples
    ///
    /// A dict read into a struct of the program's own (see
    /// [`from_value`](crate::from_value)), until the peer hangs up:
    ///
    /// ```
    /// use std::os::unix::net::UnixStream;
    ///
    /// use tensorshare::connection::{self, ConnectionOptions};
    /// use tensorshare::serde::Deserialize;
    /// use tensorshare::{Authkey, Connection, Dict, SharingContext, Tensor};
    ///
    /// #[derive(Deserialize)]
    /// #[serde(crate = "tensorshare::serde")]
    /// struct Outputs {
    ///     logits: Tensor,
    ///     loss: f64,
    /// }
    ///
    /// let sharing = SharingContext::new(Authkey::random()?);
    /// let (ours, theirs) = UnixStream::pair().expect("a socket pair");
    /// let options = ConnectionOptions::default();
    /// let mut peer = Connection::new(connection::Connection::from_stream(theirs, options), &sharing)?;
    /// let mut connection =
    ///     Connection::new(connection::Connection::from_stream(ours, options), &sharing)?;
    /// // What torch's `conn.send({"logits": logits, "loss": loss.item()})` sends.
    /// let logits = Tensor::from_slice(&sharing, &[1.0f32, -1.0], &[1, 2])?;
    /// peer.send(&Dict::new().with("logits", logits).with("loss", 0.5).into())?;
    /// drop(peer);
    ///
    /// let outputs: Outputs = tensorshare::from_value(&connection.recv()?)?;
    /// assert_eq!((outputs.logits.sizes(), outputs.loss), (&[1, 2][..], 0.5));
    /// assert!(connection.recv().expect_err("the peer hung up").is_closed());
    /// # Ok::<(), tensorshare::Error>(())
    /// ```
    pub fn recv(&mut self) -> Result<Value, Error> {
        let message = self.recv_message()?;
        rebuild(&self.sharing, message, self.origin())
    }

    /// The next message's bytes and fds, as they arrived; what arrived of
    /// one the socket has not finished is kept for the next call.
    pub(crate) fn recv_message(&mut self) -> Result<ReceivedMessage, Error> {
        self.inner
            .recv_message()
            .map_err(|error| connection_failed(&self.sharing, error))
    }

    /// Where this connection's messages come from, for the checks that
    /// depend on it.
    pub(crate) fn origin(&self) -> MessageOrigin {
        if self.inner.stream().is_tcp() {
            MessageOrigin::Tcp {
                peer: self.inner.tcp_peer(),
            }
        } else {
            MessageOrigin::Local
        }
    }

    /// The context messages go through.
    pub fn sharing(&self) -> &SharingContext {
        &self.sharing
    }

    /// A second handle on the same connection and context, for a thread
    /// that receives while another sends.
    ///
    /// # Errors
    ///
    /// As [`connection::Connection::try_clone`].
    pub fn try_clone(&self) -> Result<Self, Error> {
        Ok(Self {
            inner: self.inner.try_clone()?,
            sharing: self.sharing.clone(),
        })
    }

    /// The byte-level connection.
    pub fn get_ref(&self) -> &connection::Connection {
        &self.inner
    }

    /// The byte-level connection, to send or receive bytes as they are or
    /// set timeouts.
    pub fn get_mut(&mut self) -> &mut connection::Connection {
        &mut self.inner
    }

    /// The byte-level connection, without the context.
    pub fn into_inner(self) -> connection::Connection {
        self.inner
    }
}

impl AsFd for Connection {
    /// The socket, readable when a message (or the end of the stream) is
    /// waiting.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

/// The value `message` holds, rebuilt through `sharing` with its storages
/// attached. Large `bytes` in the message are decoded as slices of its
/// buffer, which the connection reads the next message into once they are
/// all gone.
pub(crate) fn rebuild(
    sharing: &SharingContext,
    message: ReceivedMessage,
    origin: MessageOrigin,
) -> Result<Value, Error> {
    sharing.loads_with_fds(&message.bytes, message.fds, origin)
}

/// A connection that failed, said as its cause when peers failed to
/// authenticate to this process's resource sharer since the last report:
/// a torch peer whose fetch was refused raises and leaves, which shows
/// here as a broken connection.
pub(crate) fn connection_failed(sharing: &SharingContext, error: ConnectionError) -> Error {
    match sharing.new_auth_failures() {
        Some(failures) => Error::PeerAuthkey {
            failures,
            connection: Some(error),
        },
        None => Error::Connection(error),
    }
}
