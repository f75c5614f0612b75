//! The private directory a manager's socket lives in.

use std::path::PathBuf;

use crate::platform::errno_of;
use crate::platform::private_dir::{
    MANAGER_SOCKET_NAME, SocketDirKind, SocketDirName, create_private_dir_in, socket_parent_dir,
};
use crate::services::shm_manager::ManagerError;

/// Creates `tensorshare-shm-XXXXXX` ([`SocketDirName::fresh_manager`]),
/// mode 0700, in [`socket_parent_dir`].
///
/// The socket stays a path: torch's libshm clients copy the manager handle
/// with `strcpy`, so an abstract name (leading NUL) would reach them empty.
pub(super) fn create_private_dir() -> Result<PathBuf, ManagerError> {
    let inner_len =
        1 + SocketDirName::max_len(SocketDirKind::ShmManager) + 1 + MANAGER_SOCKET_NAME.len();
    let parent = socket_parent_dir(inner_len);
    create_private_dir_in(&parent, || {
        Ok(SocketDirName::fresh_manager().as_str().to_owned())
    })
    .map_err(|err| ManagerError::CreateDir {
        parent: parent.display().to_string(),
        errno: errno_of(&err),
    })
}
