//! Values over a connection: Python's `conn.send(obj)` and `conn.recv()`
//! in a torch process, joining the transport ([`connection`](crate::connection),
//! bytes and fds) with the sharing layer ([`SharingContext`]).

use std::sync::Arc;

use crate::Error;
use crate::connection::{Address, Client, Connection, ConnectionError, Listener, RegisteredFds};
use crate::model::Value;
use crate::sharing::{MessageOrigin, SharingContext};

/// Connections made with the context's own authkey: the key peers
/// authenticate with is the key they fetch storages with, so the two
/// cannot disagree.
impl SharingContext {
    /// Connects to a listener at `address` (a torch process's
    /// `multiprocessing.connection.Listener`, or [`SharingContext::listen`]'s),
    /// authenticating with this context's authkey. A TCP `address`
    /// (`host:port`) may be on another host: storages then go as bytes
    /// (see [`Connection::send`]).
    ///
    /// # Errors
    ///
    /// As [`Client::connect`].
    ///
    /// # Examples
    ///
    /// A listener in another thread stands for a torch process's
    /// `Listener(address, authkey=authkey)`:
    ///
    /// ```
    /// use std::thread;
    ///
    /// use tensorshare::{Authkey, Error, SharingContext, Tensor};
    ///
    /// let authkey = Authkey::random()?;
    /// let server = SharingContext::new(authkey.clone());
    /// let listener = server.listen_in_private_dir()?;
    /// let address = listener.address().clone();
    /// let answering = thread::spawn(move || -> Result<(), Error> {
    ///     let mut connection = listener.accept()?;
    ///     let x: Tensor = connection.recv(&server)?.try_into()?;
    ///     let doubled: Vec<i32> = x.as_slice::<i32>()?.iter().map(|v| v * 2).collect();
    ///     let doubled = Tensor::from_slice(&server, &doubled, x.sizes())?;
    ///     connection.send(&doubled.into(), &server)?;
    ///     // The client fetched the answer while it unpickled it: stop when it has.
    ///     Ok(server.wait_until_fetched(std::time::Duration::from_secs(10))?)
    /// });
    ///
    /// let client = SharingContext::new(authkey);
    /// let mut connection = client.connect(&address)?;
    /// connection.send(&Tensor::from_slice(&client, &[1i32, 2, 3], &[3])?.into(), &client)?;
    /// let doubled: Tensor = connection.recv(&client)?.try_into()?;
    /// assert_eq!(doubled.as_slice::<i32>()?, [2, 4, 6]);
    /// answering.join().expect("the server thread")?;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn connect(&self, address: &Address) -> Result<Connection, Error> {
        Ok(Client::connect(
            address,
            self.authkey(),
            self.connection_options(),
        )?)
    }

    /// Listens on `address` for peers holding this context's authkey.
    ///
    /// # Errors
    ///
    /// As [`Listener::bind`].
    ///
    /// # Examples
    ///
    /// An abstract address (`@name`: nothing on disk), which a torch
    /// process connects to as `Client("\0name", authkey=authkey)`:
    ///
    /// ```
    /// use tensorshare::{Address, Authkey, SharingContext};
    ///
    /// let sharing = SharingContext::new(Authkey::random()?);
    /// let listener = sharing.listen(&Address::unique_abstract("trainer")?)?;
    /// assert!(listener.address().to_string().starts_with("@tensorshare-trainer-"));
    /// # Ok::<(), tensorshare::Error>(())
    /// ```
    pub fn listen(&self, address: &Address) -> Result<Listener, Error> {
        Ok(Listener::bind(
            address,
            self.authkey(),
            self.connection_options(),
        )?)
    }

    /// Listens on a fresh path in a private directory, as CPython's
    /// `Listener()` without an address, for peers holding this context's
    /// authkey; [`Listener::address`] tells where.
    ///
    /// # Errors
    ///
    /// As [`Listener::bind_in_private_dir`].
    pub fn listen_in_private_dir(&self) -> Result<Listener, Error> {
        Ok(Listener::bind_in_private_dir(
            self.authkey(),
            self.connection_options(),
        )?)
    }

    /// Refuses a connection whose handshake ran with another key than
    /// this context's.
    fn check_key(&self, connection: &Connection) -> Result<(), Error> {
        match connection.authkey() {
            Some(key) if key != self.authkey() => Err(Error::AuthkeyMismatch),
            _ => Ok(()),
        }
    }

    /// A connection that failed, said as its cause when peers failed to
    /// authenticate to this process's resource sharer since the last
    /// report: a torch peer whose fetch was refused raises and leaves,
    /// which shows here as a broken connection.
    fn connection_failed(&self, error: ConnectionError) -> Error {
        match self.new_auth_failures() {
            Some(failures) => Error::PeerAuthkey {
                failures,
                connection: Some(error),
            },
            None => Error::Connection(error),
        }
    }
}

impl Connection {
    /// Sends `value` as Python's `conn.send(value)` would from a torch
    /// process: pickled by `sharing`, storages shared with its strategy.
    ///
    /// A Rust struct goes as the dict torch code expects through
    /// [`to_value`](crate::to_value): `connection.send(&to_value(&batch)?,
    /// &sharing)`.
    ///
    /// The fds of shared storages also ride on the message itself (see
    /// [`SharingContext::with_inline_fds`]); Python peers ignore them.
    ///
    /// Over a TCP connection ([`Connection::is_tcp`]) every storage goes as
    /// `bytes`, inline, whatever the context's strategy, since shared
    /// memory does not reach another host; unless the strategy is
    /// [pinned](SharingContext::with_pinned_strategy) to one that shares
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
    /// Under `file_descriptor` (the default) a receiver fetches each
    /// storage's fd from this process's resource sharer while it unpickles
    /// the message: this process must still run then. Call
    /// [`SharingContext::wait_until_fetched`] before exiting. The other
    /// strategies' rules are in the [crate docs](crate#what-a-sender-keeps-alive).
    ///
    /// # Errors
    ///
    /// When a storage cannot be shared; [`Error::AuthkeyMismatch`] when the
    /// connection was authenticated with another key than `sharing`'s;
    /// [`Error::Connection`] when the send fails, or
    /// [`Error::PeerAuthkey`] when it fails after a peer failed to
    /// authenticate to this process's resource sharer.
    ///
    /// # Examples
    ///
    /// Both ends in one process, on a socket pair:
    ///
    /// ```
    /// use std::os::unix::net::UnixStream;
    ///
    /// use tensorshare::connection::ConnectionOptions;
    /// use tensorshare::{Authkey, Connection, Dict, SharingContext, Tensor};
    ///
    /// let sharing = SharingContext::new(Authkey::random()?);
    /// let (ours, theirs) = UnixStream::pair().expect("a socket pair");
    /// let mut sender = Connection::from_stream(ours, ConnectionOptions::default());
    /// let mut receiver = Connection::from_stream(theirs, ConnectionOptions::default());
    ///
    /// let scores = Tensor::from_slice(&sharing, &[0.25f64, 0.75], &[2])?;
    /// let message = Dict::new().with("scores", &scores).with("model", "resnet18");
    /// sender.send(&message.into(), &sharing)?;
    ///
    /// let received = receiver.recv(&sharing)?;
    /// assert_eq!(received.try_get::<&str>("model")?, "resnet18");
    /// let received_scores: &Tensor = received.try_get("scores")?;
    /// assert_eq!(received_scores.as_slice::<f64>()?, scores.as_slice::<f64>()?);
    /// # Ok::<(), tensorshare::Error>(())
    /// ```
    pub fn send(&mut self, value: &Value, sharing: &SharingContext) -> Result<(), Error> {
        sharing.check_key(self)?;
        let outgoing = sharing.dumps_outgoing(value, self.is_tcp())?;
        let keys = outgoing.registered_keys();
        if !keys.is_empty() {
            // Registered keys mean the sharer has started.
            if let Ok(sharer) = sharing.resource_sharer() {
                let holder: Arc<dyn RegisteredFds> = sharer.clone();
                self.note_sent(&holder, keys);
            }
        }
        let payload = outgoing.pickle().io_slices();
        self.send_slices_with_fds(&payload, &outgoing.attached_fds())
            .map_err(|error| sharing.connection_failed(error))
    }

    /// Receives one message as Python's `conn.recv()` would in a torch
    /// process: rebuilt by `sharing`, shared storages attached.
    ///
    /// Read a dict into a Rust struct with [`from_value`](crate::from_value):
    /// `let batch: Batch = from_value(&connection.recv(&sharing)?)?`.
    ///
    /// # Errors
    ///
    /// [`Error::Connection`] when receiving fails (see
    /// [`recv_bytes`](Self::recv_bytes)), or [`Error::PeerAuthkey`] when it
    /// fails after a peer failed to authenticate to this process's resource
    /// sharer; [`Error::AuthkeyMismatch`] as for [`send`](Self::send); any
    /// error of [`SharingContext::loads`]. On a TCP connection, a storage
    /// named by a shared-memory handle is refused with
    /// [`Error::SharedMemoryOverTcp`] (inside [`Error::Attach`]), whose
    /// message tells the sender to send bytes.
    ///
    /// # Examples
    ///
    /// A dict read into a struct of the program's own (see
    /// [`from_value`](crate::from_value)):
    ///
    /// ```
    /// use std::os::unix::net::UnixStream;
    ///
    /// use tensorshare::connection::ConnectionOptions;
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
    /// let mut peer = Connection::from_stream(theirs, ConnectionOptions::default());
    /// let mut connection = Connection::from_stream(ours, ConnectionOptions::default());
    /// // What torch's `conn.send({"logits": logits, "loss": loss.item()})` sends.
    /// let logits = Tensor::from_slice(&sharing, &[1.0f32, -1.0], &[1, 2])?;
    /// peer.send(&Dict::new().with("logits", logits).with("loss", 0.5).into(), &sharing)?;
    ///
    /// let outputs: Outputs = tensorshare::from_value(&connection.recv(&sharing)?)?;
    /// assert_eq!((outputs.logits.sizes(), outputs.loss), (&[1, 2][..], 0.5));
    /// # Ok::<(), tensorshare::Error>(())
    /// ```
    pub fn recv(&mut self, sharing: &SharingContext) -> Result<Value, Error> {
        sharing.check_key(self)?;
        let message = self
            .recv_message()
            .map_err(|error| sharing.connection_failed(error))?;
        // Large `bytes` in the message are decoded as slices of its buffer,
        // which comes back for the next message once they are all gone.
        let origin = if self.is_tcp() {
            MessageOrigin::Tcp {
                peer: self.tcp_peer(),
            }
        } else {
            MessageOrigin::Local
        };
        let value = sharing.loads_with_fds(&message.bytes, message.fds, origin);
        drop(message.bytes);
        self.reuse_buffer(message.buffer);
        value
    }
}
