//! How rebuilders attach the shared storages a received message names.
//!
//! torch's rebuilders (`rebuild_storage_fd`, `rebuild_storage_filename`,
//! `StorageBase.from_file`) name memory in another process. The registry
//! only reads those names; attaching them (fetching an fd from the
//! sender's resource sharer, mapping a segment or a file, sharing one
//! mapping between messages) is the sharing layer's, which implements
//! [`StorageAttacher`] for each message it receives. Without an attacher
//! (`Registry::loads`, `inspect`) the rebuilders describe each storage
//! instead ([`Storage::remote`]).

use std::error::Error as StdError;
use std::fmt;

use crate::model::{DupFdRef, SegmentRef, Storage};

/// Attaches the storages one received message names, `nbytes` of each.
pub(crate) trait StorageAttacher: fmt::Debug {
    /// The storage a `DupFd` names.
    fn attach_fd(&self, dup_fd: &DupFdRef, nbytes: usize) -> Result<Storage, AttachError>;
    /// The storage in a `file_system` segment.
    fn attach_segment(&self, segment: &SegmentRef, nbytes: usize) -> Result<Storage, AttachError>;
    /// The storage in the `memmap` file at `path`.
    fn attach_file(&self, path: &str, nbytes: usize) -> Result<Storage, AttachError>;
}

/// Why a storage could not be attached, in the attacher's own error type,
/// which the registry carries without knowing it.
pub struct AttachError(Box<dyn StdError + Send + Sync>);

impl AttachError {
    /// Wraps the attacher's error.
    pub(crate) fn new(cause: impl StdError + Send + Sync + 'static) -> Self {
        Self(Box::new(cause))
    }

    /// An error the attacher handed back unrecognized, carried on.
    pub(crate) fn from_boxed(cause: Box<dyn StdError + Send + Sync>) -> Self {
        Self(cause)
    }

    /// The attacher's error, for the attacher to take back.
    pub(crate) fn into_inner(self) -> Box<dyn StdError + Send + Sync> {
        self.0
    }
}

impl fmt::Debug for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}
