//! The listening side: Python's `multiprocessing.connection.Listener`.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

use super::stream::{Role, authenticate};
use super::tcp_address::{TcpAddress, is_loopback};
use super::{
    Address, Authkey, Connection, ConnectionError, ConnectionOptions, PrivateTempDir, StreamSocket,
};

/// A listening `AF_UNIX` or TCP socket that authenticates every connection,
/// as Python's `Listener(address, authkey=...)`.
///
/// Dropping it closes the socket and removes the socket file it created
/// (and the directory, for [`Listener::bind_in_private_dir`]).
///
/// A TCP listener (`Listener::bind(&"0.0.0.0:6000".parse()?, ...)`) is
/// what Python's `Listener(("0.0.0.0", 6000), authkey=...)` is: the
/// authkey handshake proves a peer holds the key, and nothing is
/// encrypted. Anyone on the path reads every tensor, and one who can
/// also inject traffic can take over a connection after its handshake.
/// Listen on a non-loopback address only on a network you trust, with a
/// long random key ([`Authkey::random`]). Storages go as bytes over TCP
/// (see [`Connection::send`](crate::Connection::send)).
///
/// ```
/// use tensorshare::connection::{Address, Authkey, Client, ConnectionOptions, Listener};
///
/// let authkey = Authkey::random()?;
/// let options = ConnectionOptions::default();
/// // Port 0: the kernel picks a free port, and `address` says which.
/// let listener = Listener::bind(&"127.0.0.1:0".parse()?, &authkey, options)?;
/// let address: Address = listener.address().clone();
/// assert_ne!(address.as_tcp().map(|tcp| tcp.port()), Some(0));
/// assert!(!listener.is_reachable_from_other_hosts());
/// let server = std::thread::spawn(move || listener.accept()?.recv_bytes());
/// Client::connect(&address, &authkey, options)?.send_bytes(b"\x80\x04N.")?;
/// assert_eq!(server.join().expect("the listener thread")?, b"\x80\x04N.");
/// # Ok::<(), tensorshare::connection::ConnectionError>(())
/// ```
///
/// # Examples
///
/// A server loop that survives peers with the wrong key:
///
/// ```no_run
/// use tensorshare::connection::{Address, Authkey, ConnectionOptions, Listener};
///
/// let address: Address = "@tensorshare-example".parse()?;
/// let authkey = Authkey::from_hex("00ff")?;
/// let listener = Listener::bind(&address, &authkey, ConnectionOptions::default())?;
/// loop {
///     match listener.accept() {
///         Ok(mut connection) => {
///             let message = connection.recv_bytes()?;
///             connection.send_bytes(&message)?;
///         }
///         Err(refused) if refused.is_handshake_failure() => eprintln!("{refused}"),
///         Err(fatal) => return Err(fatal.into()),
///     }
/// }
/// # #[allow(unreachable_code)]
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Listener {
    socket: ListeningSocket,
    address: Address,
    authkey: Authkey,
    options: ConnectionOptions,
    socket_file: Option<SocketFile>,
    /// Declared after everything else so it is removed last, once the
    /// socket file inside it is gone.
    private_dir: Option<PrivateTempDir>,
}

/// A listening socket of either family.
#[derive(Debug)]
enum ListeningSocket {
    Unix(UnixListener),
    Tcp(TcpListener),
}

/// The socket file `bind` created, identified so that `Drop` removes only
/// that file and not one another process has since put at the same path.
#[derive(Debug)]
struct SocketFile {
    path: PathBuf,
    device: u64,
    inode: u64,
}

impl Listener {
    /// Listens on `address`; connections must prove they hold `authkey`.
    ///
    /// A TCP endpoint binds the first address its host resolves to that
    /// binds, IPv4 ones first as CPython binds a name (Python clients
    /// connect over IPv4 alone), with `SO_REUSEADDR` as CPython's
    /// `SocketListener` sets it;
    /// port 0 takes a free port. [`Listener::address`] then gives the bound
    /// IP address and port, as CPython's `Listener.address` does.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Bind`] when the socket cannot be bound, e.g. the
    /// path exists already (CPython does not replace it either), the
    /// abstract name or port is taken, or the host does not resolve.
    pub fn bind(
        address: &Address,
        authkey: &Authkey,
        options: ConnectionOptions,
    ) -> Result<Self, ConnectionError> {
        let bind_error = |cause| ConnectionError::Bind {
            address: address.clone(),
            cause,
        };
        let Some(tcp) = address.as_tcp() else {
            let socket = address.listen().map_err(bind_error)?;
            return Ok(Self::listening(socket, address, authkey, options));
        };
        let socket = tcp.listen().map_err(bind_error)?;
        let bound = socket.local_addr().map_err(bind_error)?;
        Ok(Self {
            socket: ListeningSocket::Tcp(socket),
            address: Address::from(bound),
            authkey: authkey.clone(),
            options,
            socket_file: None,
            private_dir: None,
        })
    }

    /// Listens on a fresh abstract name ([`Address::unique_abstract`]
    /// with the tag `listener`): nothing on disk, so a process killed by
    /// SIGKILL leaves nothing behind. For peers in the same network
    /// namespace; [`Listener::address`] tells where.
    ///
    /// # Errors
    ///
    /// As [`Address::unique_abstract`] and [`Listener::bind`].
    pub fn bind_unique_abstract(
        authkey: &Authkey,
        options: ConnectionOptions,
    ) -> Result<Self, ConnectionError> {
        let (socket, address) = Address::listen_unique_abstract("listener")?;
        Ok(Self::listening(socket, &address, authkey, options))
    }

    /// The listener of `socket`, just bound at `address`.
    fn listening(
        socket: UnixListener,
        address: &Address,
        authkey: &Authkey,
        options: ConnectionOptions,
    ) -> Self {
        // If the new file cannot even be inspected, it is not removed on drop:
        // leaving a stale file is better than removing one we cannot identify.
        let socket_file = address.as_path().and_then(|path| {
            let metadata = std::fs::symlink_metadata(path).ok()?;
            Some(SocketFile {
                path: path.to_path_buf(),
                device: metadata.dev(),
                inode: metadata.ino(),
            })
        });
        Self {
            socket: ListeningSocket::Unix(socket),
            address: address.clone(),
            authkey: authkey.clone(),
            options,
            socket_file,
            private_dir: None,
        }
    }

    /// Listens on a fresh path in a new directory only this user can enter
    /// (`$TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX`, removed with the
    /// listener), as CPython's `Listener()` without an address;
    /// [`Listener::address`] tells where.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Io`] when the directory cannot be made, and as
    /// [`Listener::bind`].
    pub fn bind_in_private_dir(
        authkey: &Authkey,
        options: ConnectionOptions,
    ) -> Result<Self, ConnectionError> {
        let dir = PrivateTempDir::create()?;
        let address = dir.unique_address()?;
        let mut listener = Self::bind(&address, authkey, options)?;
        listener.private_dir = Some(dir);
        Ok(listener)
    }

    /// Waits for the next peer and runs the authkey handshake with it,
    /// within [`ConnectionOptions::with_handshake_timeout`].
    ///
    /// # Errors
    ///
    /// For one failed peer, [`ConnectionError::Auth`] (wrong authkey or not
    /// a `multiprocessing.connection` peer) or
    /// [`ConnectionError::HandshakeTimeout`]: that connection is closed and
    /// the listener stays usable
    /// ([`ConnectionError::is_handshake_failure`]).
    /// [`ConnectionError::Accept`] when the socket itself fails (e.g. out of
    /// file descriptors), or, on a non-blocking listener, when no peer is
    /// waiting ([`ConnectionError::is_would_block`]).
    ///
    /// # Examples
    ///
    /// A client in another thread stands for Python's
    /// `Client(address, authkey=authkey)`:
    ///
    /// ```
    /// use tensorshare::connection::{Authkey, Client, ConnectionError, ConnectionOptions, Listener};
    ///
    /// let authkey = Authkey::random()?;
    /// let options = ConnectionOptions::default();
    /// let listener = Listener::bind_unique_abstract(&authkey, options)?;
    /// let (address, key) = (listener.address().clone(), authkey.clone());
    /// let client = std::thread::spawn(move || -> Result<(), ConnectionError> {
    ///     Client::connect(&address, &key, options)?.send_bytes(b"\x80\x04N.") // pickle.dumps(None)
    /// });
    ///
    /// let mut connection = listener.accept()?;
    /// assert_eq!(connection.authkey(), Some(&authkey));
    /// assert_eq!(connection.recv_bytes()?, b"\x80\x04N.");
    /// client.join().expect("the client thread")?;
    /// # Ok::<(), ConnectionError>(())
    /// ```
    pub fn accept(&self) -> Result<Connection, ConnectionError> {
        self.accept_unauthenticated()?.authenticate()
    }

    /// Takes the next peer without authenticating it yet, so that a server
    /// can run each handshake on the peer's own thread and one slow peer
    /// does not hold up the others.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Accept`] as for [`Listener::accept`].
    pub fn accept_unauthenticated(&self) -> Result<IncomingConnection, ConnectionError> {
        let stream = loop {
            let accepted = match &self.socket {
                ListeningSocket::Unix(socket) => socket.accept().map(|(s, _)| s.into()),
                ListeningSocket::Tcp(socket) => socket.accept().map(|(s, _)| s.into()),
            };
            match accepted {
                Ok(stream) => break stream,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::Interrupted | std::io::ErrorKind::ConnectionAborted
                    ) => {}
                Err(cause) => {
                    return Err(ConnectionError::Accept {
                        address: self.address.clone(),
                        cause,
                    });
                }
            }
        };
        Ok(IncomingConnection {
            stream,
            address: self.address.clone(),
            authkey: self.authkey.clone(),
            options: self.options,
        })
    }

    /// Makes [`Listener::accept`] return at once when no peer is waiting,
    /// for servers that poll the socket ([`AsFd`]) or check for shutdown
    /// between attempts.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Io`] when the socket refuses the change.
    pub fn set_nonblocking(&self, nonblocking: bool) -> Result<(), ConnectionError> {
        match &self.socket {
            ListeningSocket::Unix(socket) => socket.set_nonblocking(nonblocking),
            ListeningSocket::Tcp(socket) => socket.set_nonblocking(nonblocking),
        }
        .map_err(|e| ConnectionError::io("changing the listener's blocking mode", e))
    }

    /// Where this listener listens; for TCP, the bound IP address and the
    /// real port.
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// Whether peers on other hosts can connect: a TCP listener bound to
    /// an address other than a loopback one (`0.0.0.0` and `::` included).
    pub fn is_reachable_from_other_hosts(&self) -> bool {
        self.address
            .as_tcp()
            .and_then(TcpAddress::ip)
            .is_some_and(|ip| !is_loopback(ip))
    }
}

impl AsFd for Listener {
    /// The listening socket, readable when a peer is waiting.
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.socket {
            ListeningSocket::Unix(socket) => socket.as_fd(),
            ListeningSocket::Tcp(socket) => socket.as_fd(),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let Some(file) = &self.socket_file else {
            return;
        };
        // Another process may have removed our file and bound its own at the
        // same path: that one is not ours to remove. A failure to remove only
        // leaves a stale file, which the next bind reports with advice.
        let still_ours = std::fs::symlink_metadata(&file.path)
            .is_ok_and(|metadata| metadata.dev() == file.device && metadata.ino() == file.inode);
        if still_ours {
            let _ = std::fs::remove_file(&file.path);
        }
    }
}

/// A peer accepted by [`Listener::accept_unauthenticated`] that has not
/// proved it holds the authkey yet. Nothing may be read from or sent to it
/// before [`IncomingConnection::authenticate`].
#[derive(Debug)]
pub struct IncomingConnection {
    stream: StreamSocket,
    address: Address,
    authkey: Authkey,
    options: ConnectionOptions,
}

impl IncomingConnection {
    /// The peer's address, for a TCP connection: who to name in a log.
    pub fn tcp_peer(&self) -> Option<SocketAddr> {
        self.stream.tcp_peer()
    }

    /// Runs the authkey handshake, within
    /// [`ConnectionOptions::with_handshake_timeout`].
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Auth`] or [`ConnectionError::HandshakeTimeout`]
    /// as for [`Listener::accept`]; the connection is closed.
    pub fn authenticate(self) -> Result<Connection, ConnectionError> {
        // Linux does not pass the listener's O_NONBLOCK on to accepted
        // sockets: this one blocks, as the handshake's timeouts need.
        authenticate(
            self.stream,
            Role::Server,
            &self.address,
            &self.authkey,
            self.options,
        )
    }
}
