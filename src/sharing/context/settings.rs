//! How a [`SharingContext`] is set up: its registry, strategy, key, limits
//! and connection options.

use std::time::Duration;

use tensorshare_strategies::StrategyKind;
use tensorshare_strategies::file_descriptor::FdBudget;

use std::sync::Arc;

use super::SharingContext;
use crate::connection::{Authkey, ConnectionOptions};
use crate::registry::Registry;
use crate::resource_sharer::SharerSocket;
use crate::sync::lock;

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

    /// Waits at most `timeout` for a peer's resource sharer.
    pub fn with_fetch_timeout(mut self, timeout: Duration) -> Self {
        self.settings.fetch_timeout = timeout;
        self
    }

    /// Closes fds that no receiver fetched within `lifetime` (default 5
    /// minutes), and lets go of sent `memmap` files as long after their
    /// last send (see [`with_max_held_memmap_files`](Self::with_max_held_memmap_files)).
    pub fn with_unfetched_lifetime(self, lifetime: Duration) -> Self {
        self.state.unfetched.set_lifetime(lifetime);
        self.settings
            .memmap
            .sent_files
            .update_limits(|limits| limits.lifetime = lifetime);
        self
    }

    /// Keeps at most `count` fds registered for receivers that have not
    /// fetched them yet (default: a quarter of the soft `RLIMIT_NOFILE`).
    ///
    /// When a send would register one more, the oldest unfetched fd expires
    /// early, as it would at the end of its
    /// [unfetched lifetime](Self::with_unfetched_lifetime): its fd closes and
    /// a receiver that fetches it later gets an error. A producer streaming
    /// to a slow consumer thus never runs out of fds; raise `count` (and
    /// `ulimit -n`) if receivers fall further behind than that. `0` counts
    /// as 1.
    pub fn with_max_unfetched_fds(self, count: usize) -> Self {
        self.state.unfetched.set_max(count);
        self
    }

    /// Keeps at most `count` fds of received `file_descriptor` storages
    /// open (default: an eighth of the soft `RLIMIT_NOFILE`, at least 16).
    ///
    /// A received storage is read and written through its mapping; its fd
    /// only lets this process send the same memory on without a copy.
    /// Storages received while `count` of them keep their fds keep only
    /// their mappings, so a receiver holds any number of storages whatever
    /// its fd limit (each mapping still counts against `vm.max_map_count`).
    /// Sending such a storage on copies it once into a fresh segment, which
    /// every later send reuses while the storage lives; the copy no longer
    /// shares memory with the storage's sender.
    ///
    /// Set on a clone, the budget is that handle's own.
    pub fn with_max_received_fds(mut self, count: usize) -> Self {
        self.settings.received_fds = FdBudget::new(count);
        self
    }

    /// How many fds received storages keep open now (see
    /// [`with_max_received_fds`](Self::with_max_received_fds)).
    pub fn received_fds_held(&self) -> usize {
        self.settings.received_fds.held()
    }

    /// Whether [`Connection::send`](crate::Connection::send) attaches each
    /// shared storage's fd to the message itself (default: yes).
    ///
    /// A tensorshare receiver then maps the storage at once, instead of
    /// connecting to this process's resource sharer for each one; it gives
    /// the keys back in batches so that the sharer closes its copies. The
    /// bytes on the wire do not change and every storage is still
    /// registered with the resource sharer: a Python receiver never sees the
    /// attached fds (its kernel closes them) and fetches as always.
    pub fn with_inline_fds(mut self, inline: bool) -> Self {
        self.settings.inline_fds = inline;
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

    /// Sets where this context's resource sharer listens, instead of what
    /// `TENSORSHARE_SHARER_DIR` says ([`SharerSocket::from_env`]: the
    /// abstract namespace when it is unset). Takes effect when the sharer
    /// starts, with the first storage sent by `file_descriptor`.
    pub fn with_sharer_socket(self, socket: SharerSocket) -> Self {
        *lock(&self.state.sharer_socket) = Some(socket);
        self
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
