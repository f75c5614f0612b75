//! The sharing layer's error: why a value could not be sent, or a received
//! one attached.

use tensorshare_compat::pickle::{EncodeError, Global};
use tensorshare_strategies::memmap::InvalidMemmapDir;
use tensorshare_strategies::{AllocateError, ExportError, ImportError};

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
