//! Reading `torch.save` files (zip and legacy) through the registry.

use std::io;
use std::path::PathBuf;

use tensorshare_compat::torch_save::{self, TorchSaveFormat};

// Why a torch.save file could not be read, from the format crate.

use crate::model::Value;
use crate::registry::audit::GlobalAudit;
use crate::registry::saved::{read_options, rebuild_archive};
use crate::registry::{LoadError, Registry};

/// Reads a `torch.save` file (zip or legacy) and rebuilds its object.
///
/// Storages saved on any device (`cuda:0`, `mps`, ...) read as CPU
/// storages, as `torch.load(map_location="cpu")` reads them;
/// [`Storage::saved_location`](crate::model::Storage::saved_location) says where each was saved.
///
/// # Errors
///
/// [`LoadError::TorchSave`] for a malformed archive, [`LoadError::Decode`] or
/// [`LoadError::Rebuild`] for its pickle, the latter naming every global
/// outside the allowlist.
pub fn load_torch_save(
    bytes: &[u8],
    registry: &Registry,
) -> Result<(TorchSaveFormat, Value), LoadError> {
    let audit = GlobalAudit::new(registry);
    let archive = torch_save::read(bytes, &audit, &read_options(registry))?;
    audit.finish()?;
    rebuild_archive(archive, registry, 0, None, None)
}

/// Why a `torch.save` file could not be read or written as a file (what is
/// in it is [`Error::TorchSave`](crate::Error::TorchSave), [`Error::Rebuild`](crate::Error::Rebuild), ...).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// The file could not be opened, mapped or read.
    #[error("cannot read {}: {cause}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        cause: io::Error,
    },
    /// The file shrank while it was mapped: what was read of it is not what
    /// it holds.
    #[error(
        "{} was truncated or rewritten while it was being read; read it again once \
         whatever writes it is done (write checkpoints beside their path and rename them \
         into place, as torch.save to a temporary name does, so readers never see this)",
        path.display()
    )]
    Changed {
        /// The file.
        path: PathBuf,
    },
    /// A file a storage being written was mapped from shrank while it was
    /// read: the output would hold zeros for its lost bytes, so it was not
    /// written.
    #[error(
        "the file a storage was read from was truncated or rewritten while it was being \
         written out, so {} was not written; convert it again once whatever writes the \
         input is done",
        path.display()
    )]
    SourceChanged {
        /// The output that was not written.
        path: PathBuf,
    },
    /// The output could not be written.
    #[error("cannot write {}: {cause}", path.display())]
    Write {
        /// The output.
        path: PathBuf,
        /// What the OS said.
        cause: io::Error,
    },
}

impl FileError {
    /// The OS error behind this one, if there is one.
    pub(crate) fn io_error(&self) -> Option<&io::Error> {
        match self {
            FileError::Read { cause, .. } | FileError::Write { cause, .. } => Some(cause),
            _ => None,
        }
    }
}
