//! The connecting side: Python's `multiprocessing.connection.Client`.

use std::os::unix::net::UnixStream;

use super::stream::{Role, authenticate};
use super::{Address, Authkey, Connection, ConnectionError, ConnectionOptions};

/// Connects to a `multiprocessing.connection` listener, Python's or ours.
///
/// There are no `Client` values: [`Client::connect`] gives a
/// [`Connection`], as Python's `Client(address, authkey=...)` does.
///
/// # Examples
///
/// A listener in another thread stands for Python's
/// `Listener(address, authkey=authkey)`; one holding another key refuses
/// the connection:
///
/// ```
/// use std::thread;
///
/// use tensorshare::connection::{Authkey, Client, ConnectionError, ConnectionOptions, Listener};
///
/// let authkey = Authkey::random()?;
/// let options = ConnectionOptions::default();
/// let listener = Listener::bind_unique_abstract(&authkey, options)?;
/// let address = listener.address().clone();
/// let server = thread::spawn(move || -> Result<Vec<u8>, ConnectionError> {
///     let refused = listener.accept().unwrap_err();
///     assert!(refused.is_handshake_failure(), "{refused}");
///     listener.accept()?.recv_bytes()
/// });
///
/// let wrong = Authkey::new(b"not the listener's".to_vec());
/// assert!(Client::connect(&address, &wrong, options).is_err());
/// let mut connection = Client::connect(&address, &authkey, options)?;
/// connection.send_bytes(b"\x80\x04K\x07.")?; // pickle.dumps(7): Python's conn.recv() gives 7
/// assert_eq!(server.join().expect("the listener thread")?, b"\x80\x04K\x07.");
/// # Ok::<(), ConnectionError>(())
/// ```
///
/// To exchange tensors, connect through a
/// [`SharingContext`](crate::SharingContext::connect), which authenticates
/// with its own key.
#[derive(Debug)]
pub enum Client {}

impl Client {
    /// Connects to `address` and runs the authkey handshake with `authkey`,
    /// within [`ConnectionOptions::with_handshake_timeout`].
    ///
    /// A TCP endpoint's host is resolved by `getaddrinfo` and each address
    /// it gives is tried in turn until one connects, each within the
    /// handshake timeout: `localhost:6000` reaches a Python listener on
    /// `("localhost", 6000)`, which binds IPv4 alone, even where `localhost`
    /// resolves to `::1` first.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Connect`] when nothing listens there or the host
    /// does not resolve,
    /// [`ConnectionError::Auth`] when the authkeys differ or the listener does
    /// not speak the handshake, [`ConnectionError::HandshakeTimeout`] when it
    /// does not answer in time.
    pub fn connect(
        address: &Address,
        authkey: &Authkey,
        options: ConnectionOptions,
    ) -> Result<Connection, ConnectionError> {
        let connect_error = |cause| ConnectionError::Connect {
            address: address.clone(),
            cause,
        };
        let stream = match address.as_tcp() {
            Some(tcp) => (tcp.connect(options.handshake_timeout))
                .map_err(connect_error)?
                .into(),
            None => {
                let socket_address = address.to_socket_addr().map_err(connect_error)?;
                UnixStream::connect_addr(&socket_address)
                    .map_err(connect_error)?
                    .into()
            }
        };
        authenticate(stream, Role::Client, address, authkey, options)
    }
}
