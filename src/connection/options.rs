//! Limits and choices shared by listeners, clients and connections.

use std::time::Duration;

use tensorshare_compat::connection::Dialect;

/// The default [`ConnectionOptions::max_message_bytes`]: 1 GiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1 << 30;

/// The default [`ConnectionOptions::handshake_timeout`]: 30 seconds.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Limits and choices for a connection.
///
/// Build one from [`Default`] and change what you need:
///
/// ```
/// use std::time::Duration;
/// use tensorshare::connection::ConnectionOptions;
///
/// let options = ConnectionOptions::default()
///     .with_max_message_bytes(4 << 30)
///     .with_handshake_timeout(Duration::from_secs(5));
/// assert_eq!(options.max_message_bytes, 4 << 30);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ConnectionOptions {
    /// The longest message [`Connection::recv_bytes`](super::Connection::recv_bytes)
    /// accepts. A longer length claim is refused before anything is
    /// allocated for it.
    pub max_message_bytes: usize,
    /// How long the authkey handshake may take in all, from accept or
    /// connect to the last handshake message. A zero duration fails every
    /// handshake.
    pub handshake_timeout: Duration,
    /// The challenge this side delivers; either side answers both forms.
    pub dialect: Dialect,
    /// Whether a TCP connection sets `TCP_NODELAY` (default: off, as
    /// CPython leaves it). Every message goes out in one `writev` of its
    /// header and payload, so Nagle's algorithm never holds part of a
    /// message back waiting for an acknowledgement of the rest: on
    /// loopback, messages of 64 B to 64 MiB showed no difference beyond
    /// run-to-run noise with it on or off (the README's "Across hosts"
    /// section has the figures). Unix sockets ignore it.
    pub tcp_nodelay: bool,
}

impl Default for ConnectionOptions {
    fn default() -> Self {
        Self {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            dialect: Dialect::default(),
            tcp_nodelay: false,
        }
    }
}

impl ConnectionOptions {
    /// These options with [`max_message_bytes`](Self::max_message_bytes) set.
    #[must_use]
    pub const fn with_max_message_bytes(mut self, max_message_bytes: usize) -> Self {
        self.max_message_bytes = max_message_bytes;
        self
    }

    /// These options with [`handshake_timeout`](Self::handshake_timeout) set.
    #[must_use]
    pub const fn with_handshake_timeout(mut self, handshake_timeout: Duration) -> Self {
        self.handshake_timeout = handshake_timeout;
        self
    }

    /// These options with [`tcp_nodelay`](Self::tcp_nodelay) set.
    #[must_use]
    pub const fn with_tcp_nodelay(mut self, nodelay: bool) -> Self {
        self.tcp_nodelay = nodelay;
        self
    }

    /// These options with [`dialect`](Self::dialect) set.
    #[must_use]
    pub const fn with_dialect(mut self, dialect: Dialect) -> Self {
        self.dialect = dialect;
        self
    }
}
