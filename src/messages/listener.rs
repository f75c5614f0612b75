//! Connections made with a context's own authkey: the key peers
//! authenticate with is the key they fetch storages with, so the two
//! cannot disagree.

use std::os::fd::{AsFd, BorrowedFd};

use super::Connection;
use crate::Error;
use crate::connection::{self, Address, Client};
use crate::sharing::SharingContext;

/// A listener whose connections send and receive values through the
/// [`SharingContext`] that made it ([`SharingContext::listen`]).
///
/// The byte-level listener stays reachable ([`get_ref`](Self::get_ref)),
/// e.g. for [`accept_unauthenticated`](connection::Listener::accept_unauthenticated),
/// which lets a server run each handshake on the peer's own thread before
/// [`Connection::new`].
#[derive(Debug)]
pub struct Listener {
    inner: connection::Listener,
    sharing: SharingContext,
}

impl Listener {
    /// Waits for the next peer and authenticates it with the context's
    /// key.
    ///
    /// # Errors
    ///
    /// As [`connection::Listener::accept`]: a peer that fails the handshake
    /// is an error too ([`ConnectionError::is_handshake_failure`](connection::ConnectionError::is_handshake_failure)
    /// tells it), after which the listener goes on accepting.
    pub fn accept(&self) -> Result<Connection, Error> {
        Connection::new(self.inner.accept()?, &self.sharing)
    }

    /// Where this listener listens; for TCP, the bound IP address and the
    /// real port.
    pub fn address(&self) -> &Address {
        self.inner.address()
    }

    /// The context its connections go through.
    pub fn sharing(&self) -> &SharingContext {
        &self.sharing
    }

    /// The byte-level listener.
    pub fn get_ref(&self) -> &connection::Listener {
        &self.inner
    }

    /// The byte-level listener, without the context.
    pub fn into_inner(self) -> connection::Listener {
        self.inner
    }
}

impl AsFd for Listener {
    /// The listening socket, readable when a peer is waiting.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

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
    ///     let x: Tensor = connection.recv()?.try_into()?;
    ///     let doubled: Vec<i32> = x.as_slice::<i32>()?.iter().map(|v| v * 2).collect();
    ///     connection.send(&Tensor::from_slice(connection.sharing(), &doubled, x.sizes())?.into())?;
    ///     Ok(())
    /// });
    ///
    /// let client = SharingContext::new(authkey);
    /// let mut connection = client.connect(&address)?;
    /// connection.send(&Tensor::from_slice(&client, &[1i32, 2, 3], &[3])?.into())?;
    /// let doubled: Tensor = connection.recv()?.try_into()?;
    /// assert_eq!(doubled.as_slice::<i32>()?, [2, 4, 6]);
    /// answering.join().expect("the server thread")?;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn connect(&self, address: &Address) -> Result<Connection, Error> {
        let connection = Client::connect(address, self.authkey(), self.connection_options())?;
        Connection::new(connection, self)
    }

    /// Listens on `address` for peers holding this context's authkey.
    ///
    /// # Errors
    ///
    /// As [`connection::Listener::bind`].
    ///
    /// # Examples
    ///
    /// An abstract address (`@name`: nothing on disk), which a torch
    /// process connects to as `Client("\0name", authkey=authkey)`:
    ///
    /// ```
    /// use tensorshare::{Authkey, SharingContext};
    /// use tensorshare::connection::Address;
    ///
    /// let sharing = SharingContext::new(Authkey::random()?);
    /// let listener = sharing.listen(&Address::unique_abstract("trainer")?)?;
    /// assert!(listener.address().to_string().starts_with("@tensorshare-trainer-"));
    /// # Ok::<(), tensorshare::Error>(())
    /// ```
    pub fn listen(&self, address: &Address) -> Result<Listener, Error> {
        let inner = connection::Listener::bind(address, self.authkey(), self.connection_options())?;
        Ok(self.listening(inner))
    }

    /// Listens on a fresh path in a private directory, as CPython's
    /// `Listener()` without an address, for peers holding this context's
    /// authkey; [`Listener::address`] tells where.
    ///
    /// # Errors
    ///
    /// As [`connection::Listener::bind_in_private_dir`].
    pub fn listen_in_private_dir(&self) -> Result<Listener, Error> {
        let inner =
            connection::Listener::bind_in_private_dir(self.authkey(), self.connection_options())?;
        Ok(self.listening(inner))
    }

    fn listening(&self, inner: connection::Listener) -> Listener {
        Listener {
            inner,
            sharing: self.clone(),
        }
    }
}
