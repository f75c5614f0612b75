//! Limits and choices shared by listeners, clients and connections.

use std::time::Duration;

use tensorshare_compat::connection::Dialect;

/// The longest message a connection accepts unless
/// [`ConnectionOptions::with_max_message_bytes`] says otherwise: 1 GiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1 << 30;

/// The default handshake deadline: 30 seconds.
pub(crate) const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The default dead-peer timeout: 2 minutes.
pub(crate) const DEFAULT_TCP_DEAD_PEER_TIMEOUT: Duration = Duration::from_secs(120);

/// Limits and choices for a connection, each set by its `with_` method.
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
/// assert_ne!(options, ConnectionOptions::default());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnectionOptions {
    pub(crate) max_message_bytes: usize,
    pub(crate) handshake_timeout: Duration,
    pub(crate) dialect: Dialect,
    pub(crate) tcp_nodelay: bool,
    pub(crate) tcp_dead_peer_timeout: Option<Duration>,
}

impl Default for ConnectionOptions {
    fn default() -> Self {
        Self {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            dialect: Dialect::default(),
            tcp_nodelay: false,
            tcp_dead_peer_timeout: Some(DEFAULT_TCP_DEAD_PEER_TIMEOUT),
        }
    }
}

impl ConnectionOptions {
    /// The longest message [`Connection::recv_bytes`](super::Connection::recv_bytes)
    /// accepts. A longer length claim is refused before anything is
    /// allocated for it (default: 1 GiB).
    #[must_use]
    pub const fn with_max_message_bytes(mut self, max_message_bytes: usize) -> Self {
        self.max_message_bytes = max_message_bytes;
        self
    }

    /// How long the authkey handshake may take in all, from accept or
    /// connect to the last handshake message. A zero duration fails every
    /// handshake (default: 30 seconds).
    #[must_use]
    pub const fn with_handshake_timeout(mut self, handshake_timeout: Duration) -> Self {
        self.handshake_timeout = handshake_timeout;
        self
    }

    /// Whether a TCP connection sets `TCP_NODELAY` (default: off, as
    /// CPython leaves it). Every message goes out in one `writev` of its
    /// header and payload, so Nagle's algorithm never holds part of a
    /// message back waiting for an acknowledgement of the rest: on
    /// loopback, messages of 64 B to 64 MiB showed no difference beyond
    /// run-to-run noise with it on or off (the README's "Across hosts"
    /// section has the figures). Unix sockets ignore it.
    #[must_use]
    pub const fn with_tcp_nodelay(mut self, nodelay: bool) -> Self {
        self.tcp_nodelay = nodelay;
        self
    }

    /// How long a TCP connection waiting to receive goes on waiting for a
    /// peer that vanished without a word (its host powered off, the link
    /// cut: no FIN or RST ever comes) before the read fails (default:
    /// 2 minutes): keepalive probes start after a
    /// third of it with nothing received, and the connection fails when
    /// the rest of it passes unanswered. A live peer answers the probes,
    /// however long it takes to send. A send to a vanished peer fails by
    /// the kernel's retransmission limit (`net.ipv4.tcp_retries2`, about
    /// 15 minutes): a shorter limit on unacknowledged data
    /// (`TCP_USER_TIMEOUT`) would also cut off a live peer that is slow to
    /// read. `None` leaves keepalive off, as CPython does. Unix sockets
    /// ignore it.
    #[must_use]
    pub const fn with_tcp_dead_peer_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.tcp_dead_peer_timeout = timeout;
        self
    }

    /// The challenge this side delivers; either side answers both forms.
    #[must_use]
    pub const fn with_dialect(mut self, dialect: Dialect) -> Self {
        self.dialect = dialect;
        self
    }
}
