//! Manager handles: the socket path a manager listens on, as pickles carry it.

use std::ffi::OsStr;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::ManagerError;

/// The longest socket path, in bytes: `sun_path` holds 108 bytes, one of
/// which is the terminating NUL.
pub const MAX_HANDLE_LEN: usize = crate::platform::private_dir::MAX_SOCKET_PATH_LEN;

/// The address of a shared-memory manager: the absolute path of its Unix
/// stream socket, as torch prints it (`/tmp/torch-shm-dir-gHmPMp/manager.sock`)
/// and carries it in `rebuild_storage_filename` pickles.
///
/// Every handle that arrives from elsewhere is checked here before anything
/// connects to it: an absolute path, no NUL, no newline (the manager prints
/// its handle as one line), and short enough for `sun_path`.
///
/// # Examples
///
/// ```
/// use tensorshare_strategies::services::shm_manager::ManagerHandle;
///
/// let handle = ManagerHandle::from_bytes(b"/tmp/torch-shm-dir-gHmPMp/manager.sock")?;
/// assert_eq!(handle.as_bytes(), b"/tmp/torch-shm-dir-gHmPMp/manager.sock");
/// assert!(handle.path().ends_with("manager.sock"));
///
/// assert!(ManagerHandle::from_bytes(b"manager.sock").is_err());
/// assert!(ManagerHandle::from_bytes(b"/tmp/a\0b").is_err());
/// # Ok::<(), tensorshare_strategies::services::shm_manager::ManagerError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ManagerHandle {
    path: PathBuf,
}

impl ManagerHandle {
    /// Checks the bytes of a handle, as a pickle or a manager's first line
    /// gives them.
    ///
    /// # Errors
    ///
    /// [`ManagerError::InvalidHandle`] for an empty or relative path, a NUL
    /// or newline byte, or more than [`MAX_HANDLE_LEN`] bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ManagerError> {
        let invalid = |reason| ManagerError::InvalidHandle {
            shown: String::from_utf8_lossy(bytes).chars().take(120).collect(),
            reason,
        };
        if bytes.is_empty() {
            return Err(invalid("it is empty"));
        }
        if bytes.len() > MAX_HANDLE_LEN {
            return Err(invalid(
                "it is longer than the 107 bytes a socket path may have",
            ));
        }
        if bytes.contains(&0) {
            return Err(invalid("it contains a NUL byte"));
        }
        if bytes.contains(&b'\n') {
            return Err(invalid("it contains a newline"));
        }
        if bytes.first() != Some(&b'/') {
            return Err(invalid("it is not an absolute path"));
        }
        Ok(ManagerHandle {
            path: PathBuf::from(OsStr::from_bytes(bytes)),
        })
    }

    /// Checks a socket path given as a path.
    ///
    /// # Errors
    ///
    /// As [`from_bytes`](Self::from_bytes).
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self, ManagerError> {
        Self::from_bytes(path.as_ref().as_os_str().as_bytes())
    }

    /// The handle's bytes, as they travel in a pickle.
    pub fn as_bytes(&self) -> &[u8] {
        self.path.as_os_str().as_bytes()
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl fmt::Display for ManagerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())
    }
}

impl fmt::Debug for ManagerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ManagerHandle({:?})", self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchs_handles_are_accepted() {
        let bytes = b"/tmp/torch-shm-dir-ItV2Gr/manager.sock";
        let handle = ManagerHandle::from_bytes(bytes).unwrap();
        assert_eq!(handle.as_bytes(), bytes);
        assert_eq!(handle.to_string(), "/tmp/torch-shm-dir-ItV2Gr/manager.sock");
    }

    #[test]
    fn the_longest_socket_path_fits_and_one_more_byte_does_not() {
        let longest = format!("/{}", "a".repeat(MAX_HANDLE_LEN - 1));
        ManagerHandle::from_bytes(longest.as_bytes()).expect("the longest handle fits");
        let longer = format!("{longest}a");
        let err = ManagerHandle::from_bytes(longer.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("107 bytes"), "{err}");
    }

    #[test]
    fn hostile_handles_are_refused() {
        for bytes in [
            &b""[..],
            b"manager.sock",
            b"./manager.sock",
            b"\0abstract",
            b"/tmp/a\0b",
            b"/tmp/a\nb",
        ] {
            assert!(
                ManagerHandle::from_bytes(bytes).is_err(),
                "{:?} was accepted",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn non_utf8_paths_are_handles_too() {
        let handle = ManagerHandle::from_bytes(b"/tmp/\xff/manager.sock").unwrap();
        assert_eq!(handle.as_bytes(), b"/tmp/\xff/manager.sock");
    }
}
