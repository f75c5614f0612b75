//! The private directory a manager's socket lives in.

use std::path::PathBuf;

use crate::error::errno_of;
use crate::private_dir::{create_private_dir_in, socket_parent_dir};
use crate::shm_manager::ManagerError;
use crate::unique_name::random_u64;

/// The name of the socket inside a private directory, as torch names it.
pub(super) const SOCKET_NAME: &str = "manager.sock";

/// The prefix of private directories.
pub(super) const DIR_PREFIX: &str = "tensorshare-shm-";

/// Random characters in a private directory's name, as `mkdtemp`'s `XXXXXX`.
const DIR_RANDOM_LEN: usize = 6;
// One character per byte of a `random_u64`.
const _: () = assert!(DIR_RANDOM_LEN <= size_of::<u64>());

/// Creates `DIR_PREFIX` + 6 random characters, mode 0700, in
/// [`socket_parent_dir`].
pub(super) fn create_private_dir() -> Result<PathBuf, ManagerError> {
    let inner_len = 1 + DIR_PREFIX.len() + DIR_RANDOM_LEN + 1 + SOCKET_NAME.len();
    let parent = socket_parent_dir(inner_len);
    create_private_dir_in(&parent, || Ok(format!("{DIR_PREFIX}{}", random_suffix()))).map_err(
        |err| ManagerError::CreateDir {
            parent: parent.display().to_string(),
            errno: errno_of(&err),
        },
    )
}

/// `DIR_RANDOM_LEN` characters of `[0-9A-Za-z]` from the OS's random source.
fn random_suffix() -> String {
    const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    random_u64()
        .to_ne_bytes()
        .iter()
        .take(DIR_RANDOM_LEN)
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect()
}
