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
/// use tensorshare_strategies::platform::private_dir::create_private_dir_in;
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

/// The prefix of a resource sharer's private socket directory, and of its
/// abstract socket name.
pub const SHARER_PREFIX: &str = "tensorshare-sharer-";

/// The prefix of a shared-memory manager's private socket directory.
pub const MANAGER_DIR_PREFIX: &str = "tensorshare-shm-";

/// The socket inside a manager's private directory, as torch names it.
pub const MANAGER_SOCKET_NAME: &str = "manager.sock";

/// The prefix of a resource sharer's socket inside its directory, as
/// CPython's `arbitrary_address('AF_UNIX')` names it.
pub const SHARER_SOCKET_PREFIX: &str = "listener-";

/// Random characters after the pid in a sharer's directory name, and in
/// its socket's name inside.
pub const SHARER_RANDOM_LEN: usize = 8;

/// Random characters in a manager's directory name, as `mkdtemp`'s `XXXXXX`.
pub const MANAGER_RANDOM_LEN: usize = 6;

/// Which tensorshare process made a private socket directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum SocketDirKind {
    /// A resource sharer told to listen on a path:
    /// `tensorshare-sharer-<pid>-XXXXXXXX/listener-XXXXXXXX`.
    ResourceSharer,
    /// A shared-memory manager: `tensorshare-shm-XXXXXX/manager.sock`.
    ShmManager,
}

impl SocketDirKind {
    /// `resource_sharer` or `shm_manager`.
    pub fn as_str(self) -> &'static str {
        match self {
            SocketDirKind::ResourceSharer => "resource_sharer",
            SocketDirKind::ShmManager => "shm_manager",
        }
    }

    /// Whether a socket of this name may live in a directory of this kind.
    pub fn is_socket_name(self, name: &[u8]) -> bool {
        match self {
            SocketDirKind::ResourceSharer => name
                .strip_prefix(SHARER_SOCKET_PREFIX.as_bytes())
                .is_some_and(|random| is_random_part(random, SHARER_RANDOM_LEN)),
            SocketDirKind::ShmManager => name == MANAGER_SOCKET_NAME.as_bytes(),
        }
    }
}

/// The name of a private socket directory that tensorshare makes, which is
/// how `tensorshare gc` tells its own directories from other programs':
///
/// - `tensorshare-sharer-<pid>-XXXXXXXX`: a resource sharer's, when it
///   listens on a path rather than in the abstract namespace; `<pid>` is
///   the process that made it;
/// - `tensorshare-shm-XXXXXX`: a shared-memory manager's (which forks after
///   binding, so its name carries no pid).
///
/// `X` is a letter, digit or `_`. CPython's own `pymp-XXXXXXXX`
/// directories, which tensorshare's resource sharer also used before it
/// moved to the abstract namespace, cannot be told apart from each other,
/// and are none of these.
///
/// # Examples
///
/// ```
/// use tensorshare_strategies::platform::private_dir::{SocketDirKind, SocketDirName};
///
/// let sharer = SocketDirName::parse("tensorshare-sharer-4242-ab_cd123")?;
/// assert_eq!(sharer.kind(), SocketDirKind::ResourceSharer);
/// assert_eq!(sharer.creator_pid(), Some(4242));
///
/// let manager = SocketDirName::parse("tensorshare-shm-Ab12cD")?;
/// assert_eq!(manager.creator_pid(), None);
///
/// assert!(SocketDirName::parse("pymp-abcd1234").is_err());
/// # Ok::<(), tensorshare_strategies::platform::private_dir::InvalidSocketDirName>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SocketDirName {
    name: String,
    kind: SocketDirKind,
    creator_pid: Option<u32>,
}

/// A name that is not one of tensorshare's socket directory names.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{shown:?} is not a tensorshare socket directory name (tensorshare-sharer-<pid>-XXXXXXXX or \
     tensorshare-shm-XXXXXX): {reason}"
)]
pub struct InvalidSocketDirName {
    /// The name as given, lossily decoded and cut to 80 characters.
    pub shown: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl SocketDirName {
    /// Checks that `name` is one of tensorshare's socket directory names.
    ///
    /// # Errors
    ///
    /// [`InvalidSocketDirName`] for anything else: another prefix, a pid
    /// that is not a positive decimal number, a random part of the wrong
    /// length or with other bytes than letters, digits and `_`.
    pub fn parse(name: &str) -> Result<Self, InvalidSocketDirName> {
        let invalid = |reason| InvalidSocketDirName {
            shown: name.chars().take(80).collect(),
            reason,
        };
        if let Some(rest) = name.strip_prefix(SHARER_PREFIX) {
            let (pid, random) = rest
                .split_once('-')
                .ok_or_else(|| invalid("no - after the pid"))?;
            let creator_pid = parse_pid(pid).ok_or_else(|| invalid("the pid is not a number"))?;
            if !is_random_part(random.as_bytes(), SHARER_RANDOM_LEN) {
                return Err(invalid(
                    "the part after the pid is not 8 letters, digits or _",
                ));
            }
            return Ok(Self {
                name: name.to_owned(),
                kind: SocketDirKind::ResourceSharer,
                creator_pid: Some(creator_pid),
            });
        }
        if let Some(random) = name.strip_prefix(MANAGER_DIR_PREFIX) {
            if !is_random_part(random.as_bytes(), MANAGER_RANDOM_LEN) {
                return Err(invalid(
                    "the part after the prefix is not 6 letters, digits or _",
                ));
            }
            return Ok(Self {
                name: name.to_owned(),
                kind: SocketDirKind::ShmManager,
                creator_pid: None,
            });
        }
        Err(invalid(
            "it starts with neither tensorshare-sharer- nor tensorshare-shm-",
        ))
    }

    /// A fresh name for a resource sharer's directory, for this process.
    pub fn fresh_sharer() -> Self {
        Self {
            name: format!(
                "{SHARER_PREFIX}{}-{}",
                std::process::id(),
                random_part(SHARER_RANDOM_LEN)
            ),
            kind: SocketDirKind::ResourceSharer,
            creator_pid: Some(std::process::id()),
        }
    }

    /// A fresh name for a manager's directory.
    pub fn fresh_manager() -> Self {
        Self {
            name: format!("{MANAGER_DIR_PREFIX}{}", random_part(MANAGER_RANDOM_LEN)),
            kind: SocketDirKind::ShmManager,
            creator_pid: None,
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// What made the directory.
    pub fn kind(&self) -> SocketDirKind {
        self.kind
    }

    /// The process that made it, for a resource sharer's directory.
    pub fn creator_pid(&self) -> Option<u32> {
        self.creator_pid
    }

    /// The longest name of this kind, in bytes: for fitting the socket path
    /// inside into `sun_path`.
    pub fn max_len(kind: SocketDirKind) -> usize {
        match kind {
            // pid_max is at most 2^22: seven digits.
            SocketDirKind::ResourceSharer => SHARER_PREFIX.len() + 7 + 1 + SHARER_RANDOM_LEN,
            SocketDirKind::ShmManager => MANAGER_DIR_PREFIX.len() + MANAGER_RANDOM_LEN,
        }
    }
}

impl std::fmt::Display for SocketDirName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// A positive decimal pid without leading zeros.
fn parse_pid(text: &str) -> Option<u32> {
    if text.is_empty() || text.starts_with('0') || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// The characters of the random parts of our names.
const RANDOM_ALPHABET: &[u8; 63] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_";

fn is_random_part(bytes: &[u8], len: usize) -> bool {
    bytes.len() == len && bytes.iter().all(|b| RANDOM_ALPHABET.contains(b))
}

/// `len` characters of [`RANDOM_ALPHABET`] from the OS's random source.
fn random_part(len: usize) -> String {
    let mut out = String::with_capacity(len);
    while out.len() < len {
        for byte in crate::platform::unique_name::random_u64().to_ne_bytes() {
            if out.len() == len {
                break;
            }
            let index = usize::from(byte) % RANDOM_ALPHABET.len();
            out.push(char::from(RANDOM_ALPHABET[index]));
        }
    }
    out
}

/// Creates a fresh resource sharer directory ([`SocketDirName::fresh_sharer`]),
/// mode 0700, in `parent`.
///
/// # Errors
///
/// As [`create_private_dir_in`].
pub fn create_sharer_dir_in(parent: &Path) -> io::Result<PathBuf> {
    create_private_dir_in(parent, || Ok(SocketDirName::fresh_sharer().name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_names_parse_back() {
        for fresh in [
            SocketDirName::fresh_sharer(),
            SocketDirName::fresh_manager(),
        ] {
            assert_eq!(SocketDirName::parse(fresh.as_str()), Ok(fresh.clone()));
            assert!(fresh.as_str().len() <= SocketDirName::max_len(fresh.kind()));
        }
        assert_eq!(
            SocketDirName::fresh_sharer().creator_pid(),
            Some(std::process::id())
        );
    }

    #[test]
    fn other_names_are_refused() {
        for name in [
            "pymp-abcd1234",
            "tensorshare-sharer-",
            "tensorshare-sharer-12-abc",
            "tensorshare-sharer-012-abcdefgh",
            "tensorshare-sharer-x-abcdefgh",
            "tensorshare-sharer-12-abcdefgh/",
            "tensorshare-sharer-12-abcdefghi",
            "tensorshare-sharer-12-abc.efgh",
            "tensorshare-sharer-99999999999-abcdefgh",
            "tensorshare-shm-abcde",
            "tensorshare-shm-abcdefg",
            "tensorshare-shm-../abc",
            "torch_1_2_3",
        ] {
            assert!(SocketDirName::parse(name).is_err(), "{name}");
        }
    }

    #[test]
    fn socket_names_by_kind() {
        assert!(SocketDirKind::ResourceSharer.is_socket_name(b"listener-ab_12xyz"));
        assert!(!SocketDirKind::ResourceSharer.is_socket_name(b"listener-ab"));
        assert!(!SocketDirKind::ResourceSharer.is_socket_name(b"manager.sock"));
        assert!(SocketDirKind::ShmManager.is_socket_name(b"manager.sock"));
        assert!(!SocketDirKind::ShmManager.is_socket_name(b"listener-ab_12xyz"));
    }
}
