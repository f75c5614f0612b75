//! Reading `torch.save` files (zip and legacy) through the registry.

use tensorshare_compat::torch_save::{self, TorchSaveFormat};

// Why a torch.save file could not be read, from the format crate.
pub use tensorshare_compat::torch_save::TorchSaveError;

use crate::model::Value;
use crate::registry::audit::GlobalAudit;
use crate::registry::saved::{read_options, rebuild_archive};
use crate::registry::{LoadError, Registry};

/// Reads a `torch.save` file (zip or legacy) and rebuilds its object.
///
/// Storages saved on any device (`cuda:0`, `mps`, ...) read as CPU
/// storages, as `torch.load(map_location="cpu")` reads them;
/// [`Storage::saved_location`](crate::Storage::saved_location) says where each was saved.
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
    rebuild_archive(archive, registry, 0)
}
