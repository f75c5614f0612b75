//! `multiprocessing.connection` over `AF_UNIX` and TCP sockets: a [`Listener`] that
//! Python's `multiprocessing.connection.Client` connects to, a [`Client`]
//! that connects to Python's `Listener`, and the [`Connection`] both give.
//!
//! Messages are byte strings framed as CPython frames them (a 4-byte
//! big-endian length, or `-1` and an 8-byte length); [`Connection::send_bytes`]
//! is Python's `conn.send_bytes` and [`Connection::recv_bytes`] its
//! `conn.recv_bytes`. Python's `conn.send(obj)` is `send_bytes` of a pickle.
//! To exchange tensors, use the [`Connection`](crate::Connection) of a
//! [`SharingContext`](crate::SharingContext), which shares and attaches
//! the storages ([`SharingContext::connect`](crate::SharingContext::connect),
//! [`SharingContext::listen`](crate::SharingContext::listen), or
//! [`Connection::new`](crate::Connection::new) over a connection made
//! here). The bytes
//! level here is for pickles without shared storages, decoded with
//! [`Registry::loads`](crate::Registry::loads), and for other protocols.
//!
//! # Agreeing on the authkey
//!
//! Every connection starts with CPython's HMAC challenge and response in both
//! directions; the two sides must hold the same [`Authkey`]. Python
//! processes inherit theirs from the parent (`multiprocessing.current_process().authkey`,
//! 32 random bytes by default), and torch workers started through
//! `torch.multiprocessing` inherit it too. Two ways to share it with a Rust
//! program:
//!
//! - The Rust side chooses: make one with [`Authkey::random`], hand its
//!   [`Authkey::to_hex`] to Python (command line or environment), and set it
//!   there before any queue, pool or process is created:
//!   `multiprocessing.current_process().authkey = bytes.fromhex(KEY)`.
//! - The Python side chooses: print or pass on
//!   `multiprocessing.current_process().authkey.hex()` from the Python
//!   parent and give it to the Rust program, which reads it with
//!   [`Authkey::from_hex`], or from the `TENSORSHARE_AUTHKEY` environment
//!   variable with [`Authkey::from_env`].
//!
//! An empty authkey is still an authkey here: the handshake always runs.
//! CPython 3.12 skips authentication when the key is empty and CPython 3.13
//! does not; a Rust endpoint with an empty key therefore talks to 3.13 (and
//! to 3.11 and older, which also always authenticate) but not to a 3.12 peer
//! with an empty key. Skipping authentication would let any local process
//! that can reach the socket send pickles, so there is no switch for it.
//!
//! # Addresses
//!
//! An [`Address`] is an `AF_UNIX` path (`/tmp/x.sock`), an abstract name
//! (`@name`, Python's `"\0name"`), or a TCP endpoint ([`TcpAddress`]:
//! `host:port`, `[v6addr]:port`; Python's `("host", port)`). Text that does
//! not start with `/`, `.`, `@` or NUL and ends in `:PORT`, or starts with
//! `[`, is TCP; everything else is a path, as it always was.
//!
//! A TCP connection carries the same framing (the 8-byte length form
//! above 2 GiB included) and the same handshake in both dialects. It
//! authenticates but does not encrypt: see [`Listener`] for what that
//! means on a network. [`send`](crate::Connection::send) sends storages over it as
//! bytes, and [`recv`](crate::Connection::recv) refuses shared-memory handles arriving
//! on it (see [`SharingContext::with_pinned_strategy`](crate::SharingContext::with_pinned_strategy)).
//!
//! # Dialects
//!
//! CPython <= 3.11 challenges with 20 random bytes answered by HMAC-MD5;
//! CPython >= 3.12 with `{sha256}` and 40 bytes. Both are answered whatever
//! [`ConnectionOptions::with_dialect`] says; the dialect only chooses the
//! challenge this side sends, and the default ([`Dialect::Modern`]) is
//! accepted by every CPython.
//!
//! # Timeouts and buffering
//!
//! The handshake has a deadline ([`ConnectionOptions::with_handshake_timeout`]):
//! a peer that connects and says nothing costs the listener at most that
//! long. After the handshake there is no timeout until you set one with
//! [`Connection::set_read_timeout`].
//!
//! Reads are not buffered: a read never takes bytes past the end of the
//! current message, so the socket can be handed to
//! `tensorshare_strategies::platform::fd_passing` (through [`AsFd`](std::os::fd::AsFd))
//! between messages, as `multiprocessing.resource_sharer` does, without a
//! buffer swallowing the byte that carries the file descriptors.
//!
//! # Examples
//!
//! ```
//! use tensorshare::connection::{Authkey, Client, ConnectionOptions, Listener};
//!
//! let authkey = Authkey::random()?;
//! let options = ConnectionOptions::default();
//! let listener = Listener::bind_in_private_dir(&authkey, options)?;
//! let address = listener.address().clone();
//! let server = std::thread::spawn(move || listener.accept()?.recv_bytes());
//!
//! let mut connection = Client::connect(&address, &authkey, options)?;
//! connection.send_bytes(b"\x80\x04K\x07.")?; // pickle.dumps(7)
//! assert_eq!(server.join().expect("server thread")?, b"\x80\x04K\x07.");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod address;
mod attached;
mod authkey;
mod client;
pub(crate) mod deadline;
mod error;
mod listener;
mod options;
mod private_dir;
mod random;
mod receive;
mod sent_registrations;
mod socket;
mod stream;
mod tcp_address;

pub use address::Address;
pub use authkey::{AUTHKEY_ENV, Authkey, MIN_TCP_AUTHKEY_LEN};
pub use client::Client;
pub use error::ConnectionError;
pub(crate) use error::{is_fd_exhaustion, is_timeout};
pub use listener::{IncomingConnection, Listener};
pub use options::{ConnectionOptions, DEFAULT_MAX_MESSAGE_BYTES};
pub(crate) use private_dir::PrivateTempDir;
pub use socket::StreamSocket;
pub use tcp_address::TcpAddress;
pub(crate) use tcp_address::is_loopback;

pub(crate) use receive::ReceivedMessage;
pub(crate) use sent_registrations::RegisteredFds;
pub use stream::Connection;
// The wire protocol's own types, from the format crate: the handshake's
// dialect and the errors of the handshake and of the framing.
pub use tensorshare_compat::connection::{AuthError, Dialect, FramingError};
