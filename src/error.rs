//! The facade error: one enum whose variants a caller can act on.

use std::io;

use tensorshare_compat::pickle::DecodeError;
use tensorshare_compat::torch_save::{TorchSaveError, WriteError};
use tensorshare_strategies::{AllocateError, ExportError, ImportError};

use crate::ViewError;
use crate::registry::RebuildError;

/// Everything that can go wrong loading or sharing tensors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pickle is malformed, too large or too deep, or names a global
    /// that is not allowed. Nothing was executed.
    #[error("pickle refused: {0}")]
    Decode(#[from] DecodeError),
    /// The pickle decoded but a rebuilder refused it.
    #[error("cannot rebuild: {0}")]
    Rebuild(#[from] RebuildError),
    /// A `torch.save` archive is malformed.
    #[error("torch.save archive: {0}")]
    TorchSave(#[from] TorchSaveError),
    /// A `torch.save` file could not be written.
    #[error("cannot write a torch.save file: {0}")]
    TorchSaveWrite(#[from] WriteError),
    /// A tensor view does not fit its storage.
    #[error(transparent)]
    View(#[from] ViewError),
    /// Shared memory could not be allocated.
    #[error("cannot allocate shared memory: {0}")]
    Allocate(#[from] AllocateError),
    /// A segment could not be exported for another process.
    #[error("cannot share a segment: {0}")]
    Export(#[from] ExportError),
    /// A received segment could not be mapped.
    #[error("cannot map a received segment: {0}")]
    Import(#[from] ImportError),
    /// This process's resource sharer could not start.
    #[error("cannot start the resource sharer: {0}")]
    Sharer(#[from] crate::resource_sharer::SharerError),
    /// An fd could not be handed to the resource sharer.
    #[error("cannot offer an fd through the resource sharer: {0}")]
    Register(#[from] crate::resource_sharer::RegisterError),
    /// A peer's fd could not be fetched from its resource sharer.
    #[error("cannot fetch a shared fd: {0}")]
    Fetch(#[from] crate::resource_sharer::FetchError),
    /// A `multiprocessing.connection` connection failed.
    #[error(transparent)]
    Connection(#[from] crate::connection::ConnectionError),
    /// Something this build or this machine cannot do; the message says
    /// what to do instead.
    #[error("{0}")]
    Unsupported(String),
    /// An I/O operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
