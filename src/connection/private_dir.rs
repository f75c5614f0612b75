//! Private directories for listener sockets, as CPython's
//! `multiprocessing.util.get_temp_dir()` makes them.

use std::path::{Path, PathBuf};

use super::address::RANDOM_NAME_LEN;
use super::{Address, ConnectionError, random};

/// A directory only this user can enter (mode 0700), made for listener
/// sockets and removed with everything in it when dropped: CPython's
/// `multiprocessing.util.get_temp_dir()` (`$TMPDIR/pymp-XXXXXXXX`).
#[derive(Debug)]
pub(crate) struct PrivateTempDir {
    path: PathBuf,
}

impl PrivateTempDir {
    /// Creates `pymp-XXXXXXXX` in the system temporary directory, or in
    /// `/tmp` when that one cannot hold socket paths
    /// ([`socket_parent_dir`](tensorshare_strategies::platform::private_dir::socket_parent_dir)).
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Io`] when the directory cannot be created.
    pub(crate) fn create() -> Result<Self, ConnectionError> {
        // The socket path inside must fit in sun_path: "/pymp-X{8}/listener-X{8}".
        const INNER_LEN: usize = 1 + 5 + RANDOM_NAME_LEN + 1 + 9 + RANDOM_NAME_LEN;
        Self::create_in(tensorshare_strategies::platform::private_dir::socket_parent_dir(INNER_LEN))
    }

    /// Creates `pymp-XXXXXXXX` in `parent`.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Io`] when the directory cannot be created.
    pub(crate) fn create_in(parent: impl AsRef<Path>) -> Result<Self, ConnectionError> {
        let parent = parent.as_ref();
        let path =
            tensorshare_strategies::platform::private_dir::create_private_dir_in(parent, || {
                Ok(format!("pymp-{}", random::name_suffix(RANDOM_NAME_LEN)?))
            })
            .map_err(|e| {
                ConnectionError::io(
                    format!(
                        "creating a private socket directory in {}",
                        parent.display()
                    ),
                    e,
                )
            })?;
        Ok(Self { path })
    }

    /// Takes charge of a private directory made elsewhere: it is removed
    /// with everything in it when dropped.
    pub(crate) fn adopt(path: PathBuf) -> Self {
        Self { path }
    }

    /// The directory's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// A fresh socket path inside: [`Address::unique_in`] this directory.
    ///
    /// # Errors
    ///
    /// As [`Address::unique_in`].
    pub(crate) fn unique_address(&self) -> Result<Address, ConnectionError> {
        Address::unique_in(&self.path)
    }
}

impl Drop for PrivateTempDir {
    fn drop(&mut self) {
        // Nothing to do about a failure here: the directory only holds our
        // sockets and the system's temporary-file cleaning will get it.
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    #[test]
    fn private_dirs_are_0700_and_removed_on_drop() {
        use std::os::unix::fs::PermissionsExt;

        let dir = PrivateTempDir::create().expect("private dir");
        let path = dir.path().to_path_buf();
        let mode = std::fs::metadata(&path)
            .expect("metadata")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let name = path.file_name().and_then(OsStr::to_str).expect("name");
        assert!(name.starts_with("pymp-") && name.len() == 13, "{name}");
        let address = dir.unique_address().expect("address");
        let file = address
            .as_path()
            .and_then(Path::file_name)
            .and_then(OsStr::to_str);
        assert!(file.is_some_and(|f| f.starts_with("listener-") && f.len() == 17));
        assert_ne!(address, dir.unique_address().expect("address"));
        std::fs::write(path.join("left-behind"), b"x").expect("write");
        drop(dir);
        assert!(!path.exists());
    }
}
