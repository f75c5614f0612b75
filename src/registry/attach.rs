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

use std::fmt;

use crate::model::{Residence, Storage};

/// Attaches the storages one received message names, `nbytes` of each.
pub(crate) trait StorageAttacher: fmt::Debug {
    /// The storage `remote` names, as the rebuilder of its form read it
    /// from the pickle: a `DupFd`, a `file_system` segment, a `memmap`
    /// file, the handle of a strategy torch has no form for.
    fn attach(&self, remote: &Residence, nbytes: usize) -> Result<Storage, AttachCause>;
}

/// Why a storage could not be attached, in the attaching layer's own
/// error: carried up through the rebuild as [`RebuildError::Attach`]'s
/// cause, where that layer takes it back.
///
/// [`RebuildError::Attach`]: super::RebuildError::Attach
pub(crate) type AttachCause = Box<dyn std::error::Error + Send + Sync>;
