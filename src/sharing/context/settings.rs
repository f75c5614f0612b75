//! How a [`SharingContext`] handle is set up: its registry, strategy,
//! connection options and key. What it keeps for its peers, and the limits
//! on that, are `receivers.rs`'s.

use std::sync::Arc;
use std::time::Duration;

use tensorshare_strategies::StrategyKind;

use super::SharingContext;
use crate::connection::{Authkey, ConnectionOptions};
use crate::registry::Registry;

/// A handle's settings: plain values, copied with the handle, which the
/// `with_` methods set and nothing running changes. What they make (a
/// budget of received fds, a `memmap` directory's files) is the handle's
/// running state, beside them.
#[derive(Clone, Debug)]
pub(super) struct Settings {
    pub(super) registry: Arc<Registry>,
    /// The strategy for local peers, and for TCP ones too when pinned;
    /// `None` for the default, which places each storage.
    pub(super) strategy: Option<StrategyKind>,
    pub(super) strategy_pinned: bool,
    pub(super) fetch_timeout: Duration,
    /// Whether [`Connection::send`](crate::Connection::send) attaches fds to
    /// the message.
    pub(super) inline_fds: bool,
    /// How connections this context makes ([`connect`](SharingContext::connect),
    /// [`listen`](SharingContext::listen)) frame and time out.
    pub(super) connection_options: ConnectionOptions,
}

/// How long to wait for a peer's resource sharer to hand over an fd.
const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// torch's registry and the default placement; fds ride on messages.
impl Default for Settings {
    fn default() -> Self {
        Self {
            registry: Arc::default(),
            strategy: None,
            strategy_pinned: false,
            fetch_timeout: DEFAULT_FETCH_TIMEOUT,
            inline_fds: true,
            connection_options: ConnectionOptions::default(),
        }
    }
}

impl SharingContext {
    /// Uses `registry` to rebuild received pickles.
    pub fn with_registry(mut self, registry: Registry) -> Self {
        self.settings.registry = Arc::new(registry);
        self
    }

    /// Sends storages with `strategy`: `file_system`, `file_descriptor`,
    /// `memmap` (files in the [directory](Self::with_memmap_dir)) or
    /// `bytes` (copies inline, as plain `pickle.dumps` writes them),
    /// instead of placing each storage by the
    /// [default rule](crate#the-default-strategy). The strategy named is
    /// obeyed: a storage it cannot hold is an error that says so (a full
    /// `/dev/shm` under `file_system`, out of fds under
    /// `file_descriptor`). Receiving takes every strategy whatever this
    /// says.
    ///
    /// Set on a clone, it is that handle's, and of the connections it
    /// makes: the clones still share one resource sharer and one set of
    /// pools.
    ///
    /// This is the strategy for local peers: over a TCP connection
    /// [`Connection::send`](crate::Connection::send) sends storages as
    /// `bytes` whatever it says, since shared memory does not cross hosts
    /// ([`with_pinned_strategy`](Self::with_pinned_strategy) makes that an
    /// error instead).
    ///
    /// See the [crate docs](crate#what-a-sender-keeps-alive) for what each
    /// asks of the sender.
    ///
    /// # Examples
    ///
    /// A pickle that carries its storage's bytes, which plain Python's
    /// `pickle.loads` (with torch imported) rebuilds long after this
    /// process has gone:
    ///
    /// ```
    /// use tensorshare::{Authkey, SharingContext, StrategyKind, Tensor};
    ///
    /// let sharing = SharingContext::new(Authkey::random()?).with_strategy(StrategyKind::Bytes);
    /// let t = Tensor::from_slice(&sharing, &[1.0f64, 2.0], &[2])?;
    /// let pickle = sharing.dumps(&t.into())?;
    /// let back: Tensor = sharing.loads(&pickle)?.try_into()?;
    /// assert_eq!(back.as_slice::<f64>()?, [1.0, 2.0]);
    /// # Ok::<(), tensorshare::Error>(())
    /// ```
    pub fn with_strategy(mut self, strategy: StrategyKind) -> Self {
        self.settings.strategy = Some(strategy);
        self.settings.strategy_pinned = false;
        self
    }

    /// Makes the connections of [`connect`](Self::connect) and
    /// [`listen`](Self::listen) with `options` (default:
    /// [`ConnectionOptions::default`]).
    pub fn with_connection_options(mut self, options: ConnectionOptions) -> Self {
        self.settings.connection_options = options;
        self
    }

    /// The options of the connections this context makes.
    pub(crate) fn connection_options(&self) -> ConnectionOptions {
        self.settings.connection_options
    }

    /// The registry used for rebuilding.
    pub fn registry(&self) -> &Registry {
        &self.settings.registry
    }

    /// The strategy storages are sent with to local peers (to every peer,
    /// when [pinned](Self::with_pinned_strategy)); `None` under the
    /// [default](crate#the-default-strategy), which places each storage.
    pub fn strategy(&self) -> Option<StrategyKind> {
        self.settings.strategy
    }

    /// The process authkey.
    pub fn authkey(&self) -> &Authkey {
        &self.state.authkey
    }
}
