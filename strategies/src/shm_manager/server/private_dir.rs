//! The private directory a manager's socket lives in.

use std::path::PathBuf;

use crate::private_dir::create_private_dir_in;
use crate::shm_manager::ManagerError;
use crate::shm_manager::error::errno_of;
use crate::shm_manager::handle::MAX_HANDLE_LEN;

/// The name of the socket inside a private directory, as torch names it.
pub(super) const SOCKET_NAME: &str = "manager.sock";

/// The prefix of private directories.
pub(super) const DIR_PREFIX: &str = "tensorshare-shm-";

/// Random characters in a private directory's name, as `mkdtemp`'s `XXXXXX`.
const DIR_RANDOM_LEN: usize = 6;

/// Creates `DIR_PREFIX` + 6 random characters, mode 0700, in `$TMPDIR`, or
/// in `/tmp` when that is unset, relative, or too deep for a socket path.
pub(super) fn create_private_dir() -> Result<PathBuf, ManagerError> {
    let inner_len = 1 + DIR_PREFIX.len() + DIR_RANDOM_LEN + 1 + SOCKET_NAME.len();
    let temp = std::env::temp_dir();
    let parent = if temp.is_absolute() && temp.as_os_str().len() + inner_len <= MAX_HANDLE_LEN {
        temp
    } else {
        PathBuf::from("/tmp")
    };
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
    let mut bytes = [0u8; DIR_RANDOM_LEN];
    if getrandom::fill(&mut bytes).is_err() {
        // No random source at all: a per-process hash seed is the best
        // there is, and mkdir's EEXIST keeps names unique.
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        bytes.copy_from_slice(&hasher.finish().to_ne_bytes()[..DIR_RANDOM_LEN]);
    }
    bytes
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect()
}
