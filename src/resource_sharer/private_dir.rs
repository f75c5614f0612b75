//! A private directory for the sharer's socket, as CPython's
//! `util.get_temp_dir()` makes `/tmp/pymp-*` for its `listener-*` sockets.

use std::collections::hash_map::RandomState;
use std::fs::DirBuilder;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, ErrorKind};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// `sun_path` holds 108 bytes on Linux, including the terminating NUL.
const MAX_SOCKET_PATH_LEN: usize = 107;

/// Room the directory and socket names take below the root:
/// `/tensorshare-XXXXXXXX/sharer-XXXXXXXX`.
const NAMES_LEN: usize = 40;

/// How many names to try before giving up on a crowded temp dir.
const ATTEMPTS: usize = 64;

/// Creates `<temp>/tensorshare-XXXXXXXX` with mode 0700 and returns its path.
///
/// The root is `std::env::temp_dir()` (`$TMPDIR`), or `/tmp` when that path
/// is not UTF-8 (the address travels in pickles as a `str`) or too long for
/// a socket address. `mkdir` fails rather than reuse an existing entry, so
/// the directory is ours alone whatever stood in the temp dir before.
pub(crate) fn create() -> io::Result<PathBuf> {
    let preferred = std::env::temp_dir();
    let root = if usable_root(&preferred) {
        preferred
    } else {
        PathBuf::from("/tmp")
    };
    for _ in 0..ATTEMPTS {
        let dir = root.join(format!("tensorshare-{}", random_name()));
        match DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(error) if error.kind() == ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error),
        }
    }
    Err(io::Error::new(
        ErrorKind::AlreadyExists,
        format!(
            "{ATTEMPTS} random names under {} were all taken",
            root.display()
        ),
    ))
}

/// The socket's path inside `dir`.
pub(crate) fn socket_path(dir: &Path) -> PathBuf {
    dir.join(format!("sharer-{}", random_name()))
}

fn usable_root(root: &Path) -> bool {
    root.is_absolute()
        && root
            .to_str()
            .is_some_and(|text| text.len() + NAMES_LEN <= MAX_SOCKET_PATH_LEN)
}

/// Eight characters from `[a-z0-9_]`, as `tempfile.mkdtemp` uses.
///
/// `RandomState` is seeded from the OS's random source; the pid, the clock
/// and a counter make each call differ. Unpredictability is a courtesy here:
/// the directory's safety comes from `mkdir` refusing existing entries.
fn random_name() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789_";
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
    if let Ok(since_epoch) = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH) {
        hasher.write_u128(since_epoch.as_nanos());
    }
    let mut bits = hasher.finish();
    let alphabet_len = ALPHABET.len() as u64;
    (0..8)
        .map(|_| {
            let index = usize::try_from(bits % alphabet_len).unwrap_or(0);
            bits /= alphabet_len;
            char::from(ALPHABET.get(index).copied().unwrap_or(b'_'))
        })
        .collect()
}
