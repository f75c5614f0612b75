//! Which strategy a message goes with, by the connection it travels on:
//! shared memory reaches only processes on this host, so a TCP connection
//! carries storages as bytes, and refuses shared-memory handles coming in.
//!
//! A context's strategy ([`SharingContext::with_strategy`]) is a preference
//! for local peers (`AF_UNIX` connections, and [`SharingContext::dumps`]):
//! over TCP every storage goes as `bytes`, which is what
//! `pickle.dumps(tensor)` writes and any torch rebuilds unaided. A context
//! whose strategy is pinned ([`SharingContext::with_pinned_strategy`])
//! sends with it everywhere, and a pinned shared-memory strategy over TCP
//! is an error rather than a message the peer cannot open.
//!
//! Received handles (`rebuild_storage_fd`, `rebuild_storage_filename`,
//! `UntypedStorage.from_file`) are refused on every TCP connection,
//! loopback included. From another host they name memory that is not on
//! this one, or worse, memory on this one the sender has no business
//! naming; from loopback they would work, but only until the peer moves to
//! another host, so a program tested on one machine would fail on two.
//! Peers on one host that want zero-copy connect over an `AF_UNIX`
//! address.

use std::net::SocketAddr;

use tensorshare_strategies::StrategyKind;

use super::SharingContext;
use crate::Error;

/// Where a received message came from, for the storages it names.
#[derive(Clone, Copy, Debug)]
pub(crate) enum MessageOrigin {
    /// An `AF_UNIX` connection, or bytes handed to
    /// [`SharingContext::loads`]: handles are attached.
    Local,
    /// A TCP connection, from `peer` when it can be told: handles are
    /// refused.
    Tcp {
        /// The peer's address.
        peer: Option<SocketAddr>,
    },
}

impl MessageOrigin {
    /// `Ok` when a storage named by the rebuilder `form` may be attached
    /// from a message of this origin.
    pub(crate) fn admit_shared_memory(self, form: &'static str) -> Result<(), Error> {
        match self {
            Self::Local => Ok(()),
            Self::Tcp { peer } => Err(Error::SharedMemoryOverTcp { form, peer }),
        }
    }
}

impl SharingContext {
    /// Sends storages with `strategy` on every connection: unlike
    /// [`with_strategy`](Self::with_strategy), which TCP connections
    /// override with `bytes`, a pinned shared-memory strategy makes
    /// [`Connection::send`](crate::Connection::send) on a TCP connection
    /// fail with [`Error::PinnedStrategyOverTcp`]. For a program that
    /// must never copy storages, where a copy would be a bug to report.
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare::{Authkey, SharingContext, StrategyKind};
    ///
    /// let pinned = SharingContext::new(Authkey::random()?)
    ///     .with_pinned_strategy(StrategyKind::FileSystem);
    /// assert_eq!(pinned.strategy(), Some(StrategyKind::FileSystem));
    /// # Ok::<(), tensorshare::connection::ConnectionError>(())
    /// ```
    pub fn with_pinned_strategy(mut self, strategy: StrategyKind) -> Self {
        self.settings.strategy = Some(strategy);
        self.settings.strategy_pinned = true;
        self
    }

    /// The strategy for a message on a connection, `None` for the default
    /// placement; `over_tcp` for one that may reach another host.
    pub(crate) fn strategy_for(&self, over_tcp: bool) -> Result<Option<StrategyKind>, Error> {
        let strategy = self.settings.strategy;
        if !over_tcp || strategy == Some(StrategyKind::Bytes) {
            return Ok(strategy);
        }
        if let (Some(strategy), true) = (strategy, self.settings.strategy_pinned) {
            return Err(Error::PinnedStrategyOverTcp { strategy });
        }
        Ok(Some(StrategyKind::Bytes))
    }
}
