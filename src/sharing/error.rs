//! The sharing layer's error: why a value could not be sent, or a received
//! one attached.

use tensorshare_compat::pickle::{EncodeError, Global};
use tensorshare_strategies::memmap::InvalidMemmapDir;
use tensorshare_strategies::{AllocateError, ExportError, ImportError};

use super::network::shared_memory_over_tcp_message;
use super::resource_sharer::{FetchError, RegisterError, SharerError};
use crate::reduce::ReduceError;
use crate::registry::{LoadError, RebuildError};

/// Why a [`SharingContext`](super::SharingContext) could not send or
/// receive a value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SharingError {
    /// A received pickle could not be decoded or rebuilt.
    #[error(transparent)]
    Load(LoadError),
    /// A storage a received message names could not be attached.
    #[error("cannot rebuild: {callee}: {cause}")]
    Attach {
        /// The rebuilder that named the storage.
        callee: Global,
        /// What failed.
        cause: Box<SharingError>,
    },
    /// A value has no pickled form, or a storage none in this strategy.
    #[error(transparent)]
    Reduce(ReduceError),
    /// The pickle could not be encoded.
    #[error(transparent)]
    Encode(EncodeError),
    /// Shared memory could not be allocated.
    #[error("cannot allocate shared memory: {0}")]
    Allocate(AllocateError),
    /// A segment could not be exported for another process.
    #[error("cannot share a segment: {0}")]
    Export(ExportError),
    /// A received segment could not be mapped.
    #[error("cannot map a received segment: {0}")]
    Import(ImportError),
    /// This process's resource sharer could not start.
    #[error("cannot start the resource sharer: {0}")]
    Sharer(SharerError),
    /// An fd could not be handed to the resource sharer.
    #[error("cannot offer an fd through the resource sharer: {0}")]
    Register(RegisterError),
    /// A peer's fd could not be fetched from its resource sharer.
    #[error("cannot fetch a shared fd: {0}")]
    Fetch(FetchError),
    /// The memmap directory given is unusable.
    #[error(transparent)]
    MemmapDir(InvalidMemmapDir),
    /// Peers failed to authenticate to this process's resource sharer.
    #[error("{}", peer_authkey_message(*.failures))]
    PeerAuthkey {
        /// How many times, since this process started sharing.
        failures: u64,
    },
    /// A message that arrived over TCP named a storage in shared memory
    /// (an fd, a `file_system` segment or a `memmap` file): refused, since
    /// shared memory does not cross hosts. The message says what the
    /// sender should do instead.
    #[error("{}", shared_memory_over_tcp_message(form, peer.as_ref()))]
    SharedMemoryOverTcp {
        /// The rebuilder that named the storage, e.g. `rebuild_storage_fd`.
        form: &'static str,
        /// The peer, when its address could be told.
        peer: Option<std::net::SocketAddr>,
    },
    /// A send over TCP with a context whose strategy is pinned to one that
    /// shares memory ([`SharingContext::with_pinned_strategy`](super::SharingContext::with_pinned_strategy)).
    #[error(
        "this context's strategy is pinned to {strategy}, which shares memory and cannot reach \
         a peer over TCP: set it with with_strategy instead (TCP connections then send \
         storages as bytes, local ones keep {strategy}), or pin bytes"
    )]
    PinnedStrategyOverTcp {
        /// The pinned strategy.
        strategy: tensorshare_strategies::StrategyKind,
    },
    /// Storages sent were not fetched in the time given.
    #[error("{}", unfetched_message(*.pending, *.waited))]
    Unfetched {
        /// How many are still waiting.
        pending: usize,
        /// How long was waited.
        waited: std::time::Duration,
    },
}

/// What to say of storages still waiting for their receivers.
pub(crate) fn unfetched_message(pending: usize, waited: std::time::Duration) -> String {
    format!(
        "{pending} shared storages were not fetched by their receivers within {waited:.1?}: \
         keep this process running until they are, or look at why the receivers are not \
         reading their messages"
    )
}

/// What to say of peers that failed the resource sharer's handshake.
pub(crate) fn peer_authkey_message(failures: u64) -> String {
    let times = match failures {
        1 => "once".to_string(),
        n => format!("{n} times"),
    };
    format!(
        "a peer failed to authenticate to this process's resource sharer ({times}): its \
         authkey differs from this process's, so it cannot fetch the storages sent to it; \
         give every process the same key (the torch side's \
         multiprocessing.current_process().authkey)"
    )
}

impl SharingError {
    /// The error a rebuild ended with: an attach failure is this layer's
    /// own error, carried through the registry and handed back.
    pub(crate) fn from_rebuild(error: RebuildError) -> Self {
        match error {
            RebuildError::Attach { callee, cause } => match cause.into_inner().downcast() {
                Ok(cause) => SharingError::Attach { callee, cause },
                Err(other) => SharingError::Load(LoadError::Rebuild(RebuildError::Attach {
                    callee,
                    cause: crate::registry::AttachError::from_boxed(other),
                })),
            },
            error => SharingError::Load(LoadError::Rebuild(error)),
        }
    }
}

/// `From` conversions written out: `#[from]` would also make the wrapped
/// error the `source()`, which tensorshare's errors never return.
macro_rules! from_wrapped {
    ($($variant:ident($wrapped:ty)),* $(,)?) => {
        $(
            impl From<$wrapped> for SharingError {
                fn from(error: $wrapped) -> Self {
                    SharingError::$variant(error)
                }
            }
        )*
    };
}

from_wrapped!(
    Load(LoadError),
    Reduce(ReduceError),
    Encode(EncodeError),
    Allocate(AllocateError),
    Export(ExportError),
    Import(ImportError),
    Sharer(SharerError),
    Register(RegisterError),
    Fetch(FetchError),
    MemmapDir(InvalidMemmapDir),
);

impl From<tensorshare_compat::pickle::DecodeError> for SharingError {
    fn from(error: tensorshare_compat::pickle::DecodeError) -> Self {
        SharingError::Load(LoadError::Decode(error))
    }
}
