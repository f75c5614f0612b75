//! The private directory a manager's socket lives in.

use std::path::PathBuf;

use crate::error::errno_of;
use crate::private_dir::{
    MANAGER_SOCKET_NAME, SocketDirKind, SocketDirName, create_private_dir_in, socket_parent_dir,
};
use crate::shm_manager::ManagerError;

/// The name of the socket inside a private directory, as torch names it.
pub(super) const SOCKET_NAME: &str = MANAGER_SOCKET_NAME;

/// The prefix of private directories.
#[cfg(test)]
pub(super) const DIR_PREFIX: &str = crate::private_dir::MANAGER_DIR_PREFIX;

/// Creates `tensorshare-shm-XXXXXX` ([`SocketDirName::fresh_manager`]),
/// mode 0700, in [`socket_parent_dir`].
///
/// The socket stays a path: torch's libshm clients copy the manager handle
/// with `strcpy`, so an abstract name (leading NUL) would reach them empty.
pub(super) fn create_private_dir() -> Result<PathBuf, ManagerError> {
    let inner_len = 1 + SocketDirName::max_len(SocketDirKind::ShmManager) + 1 + SOCKET_NAME.len();
    let parent = socket_parent_dir(inner_len);
    create_private_dir_in(&parent, || {
        Ok(SocketDirName::fresh_manager().as_str().to_owned())
    })
    .map_err(|err| ManagerError::CreateDir {
        parent: parent.display().to_string(),
        errno: errno_of(&err),
    })
}
