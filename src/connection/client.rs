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
/// ```no_run
/// use tensorshare::connection::ConnectionOptions;
/// use tensorshare::{Address, Authkey, Client};
///
/// // The Python side: Listener('\0tensorshare-example', authkey=bytes.fromhex(KEY))
/// let address: Address = "@tensorshare-example".parse()?;
/// let authkey = Authkey::from_env()?.ok_or("set TENSORSHARE_AUTHKEY")?;
/// let mut connection = Client::connect(&address, &authkey, ConnectionOptions::default())?;
/// connection.send_bytes(b"\x80\x04K\x07.")?; // Python's conn.recv() gives 7
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub enum Client {}

impl Client {
    /// Connects to `address` and runs the authkey handshake with `authkey`,
    /// within [`ConnectionOptions::handshake_timeout`].
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Connect`] when nothing listens there,
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
        let socket_address = address.to_socket_addr().map_err(connect_error)?;
        let stream = UnixStream::connect_addr(&socket_address).map_err(connect_error)?;
        authenticate(stream, Role::Client, address, authkey, options)
    }
}
