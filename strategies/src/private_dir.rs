//! Directories only this user can enter, for sockets: the shared-memory
//! manager's and the runtime's (`multiprocessing.connection` listeners, the
//! resource sharer).

use std::fs::DirBuilder;
use std::io::{self, ErrorKind};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

/// The longest Unix socket path, in bytes: `sun_path` holds 108 bytes, one
/// of which is the path's terminating NUL (or an abstract name's leading
/// NUL).
pub const MAX_SOCKET_PATH_LEN: usize = 107;

/// Where private socket directories go: `$TMPDIR` (or `/tmp` when unset),
/// unless it is relative, not UTF-8 (socket paths travel in pickles as
/// `str`), or so deep that `inner_len` more bytes would not fit in a socket
/// path; then `/tmp`.
pub fn socket_parent_dir(inner_len: usize) -> PathBuf {
    let temp = std::env::temp_dir();
    let fits = temp.is_absolute()
        && temp.to_str().is_some()
        && temp.as_os_str().len().saturating_add(inner_len) <= MAX_SOCKET_PATH_LEN;
    if fits { temp } else { PathBuf::from("/tmp") }
}

/// How many names [`create_private_dir_in`] tries before giving up.
pub const PRIVATE_DIR_ATTEMPTS: usize = 100;

/// Creates a directory only this user can enter (mode 0700) in `parent`,
/// named by `name`, which is called again while the name is taken, up to
/// [`PRIVATE_DIR_ATTEMPTS`] times. The mode is applied at creation, so no
/// other user ever sees the directory open; the umask can only narrow it.
///
/// # Errors
///
/// The first failure of `name` or of `mkdir` other than `EEXIST`; `EEXIST`
/// when every name was taken.
///
/// # Examples
///
/// ```
/// use tensorshare_strategies::private_dir::create_private_dir_in;
///
/// let parent = std::env::temp_dir();
/// let mut n = 0;
/// let dir = create_private_dir_in(&parent, || {
///     n += 1;
///     Ok(format!("example-{}-{n}", std::process::id()))
/// })?;
/// assert!(dir.starts_with(&parent));
/// std::fs::remove_dir(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn create_private_dir_in(
    parent: &Path,
    mut name: impl FnMut() -> io::Result<String>,
) -> io::Result<PathBuf> {
    for _ in 0..PRIVATE_DIR_ATTEMPTS {
        let dir = parent.join(name()?);
        match DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(err) if err.kind() == ErrorKind::AlreadyExists => {}
            Err(err) => return Err(err),
        }
    }
    Err(Errno::EEXIST.into())
}
