//! What a scan of socket directories found: each directory, and why it
//! is kept.

use std::path::PathBuf;
use std::time::Duration;

use nix::errno::Errno;

use crate::platform::owner::UnixUser;
use crate::platform::private_dir::SocketDirName;
use crate::services::orphans::listing::FileKey;
use crate::services::orphans::report::SkipReason;

#[cfg(doc)]
use super::SocketDirScanOptions;

/// Why a socket directory is not an orphan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SocketDirKeepReason {
    /// Another user owns it: the scan removes only its own user's
    /// directories, root's included, and does not look inside others'.
    OtherUser {
        /// The owner's uid.
        uid: u32,
    },
    /// The process named in it exists (or its pid was recycled).
    CreatorAlive,
    /// A socket in it is listening: its process is alive, perhaps in
    /// another pid namespace, or another process inherited the socket.
    Listening,
    /// It was changed less than [`SocketDirScanOptions::min_age`] ago.
    Recent {
        /// How long ago it was last changed.
        age: Duration,
    },
    /// It holds something other than the sockets its kind binds:
    /// [`SocketDirReport::unexpected`].
    UnexpectedEntry,
    /// This user may not look inside (another user's directory).
    Unreadable {
        /// What opening or listing it failed with.
        errno: Errno,
    },
    /// Whether a socket in it is listening could not be told: connecting
    /// failed with this rather than being refused.
    Unprobed {
        /// What `connect` failed with.
        errno: Errno,
    },
    /// Another directory took its name during the scan.
    Replaced,
}

impl SocketDirKeepReason {
    /// A short code for machine-readable reports: `other_user`,
    /// `creator_alive`, `listening`, `recent`, `unexpected_entry`,
    /// `unreadable`, `unprobed`, `replaced`.
    pub fn code(&self) -> &'static str {
        match self {
            SocketDirKeepReason::OtherUser { .. } => "other_user",
            SocketDirKeepReason::CreatorAlive => "creator_alive",
            SocketDirKeepReason::Listening => "listening",
            SocketDirKeepReason::Recent { .. } => "recent",
            SocketDirKeepReason::UnexpectedEntry => "unexpected_entry",
            SocketDirKeepReason::Unreadable { .. } => "unreadable",
            SocketDirKeepReason::Unprobed { .. } => "unprobed",
            SocketDirKeepReason::Replaced => "replaced",
        }
    }
}

impl std::fmt::Display for SocketDirKeepReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SocketDirKeepReason::OtherUser { uid } => write!(
                f,
                "it belongs to {}: gc removes only its own user's directories; run gc as that \
                 user",
                UnixUser::of(*uid)
            ),
            SocketDirKeepReason::CreatorAlive => f.write_str("its creator is alive"),
            SocketDirKeepReason::Listening => f.write_str("a socket in it is listening"),
            SocketDirKeepReason::Recent { age } => {
                write!(f, "changed {:.1} s ago", age.as_secs_f64())
            }
            SocketDirKeepReason::UnexpectedEntry => {
                f.write_str("it holds something other than its sockets")
            }
            SocketDirKeepReason::Unreadable { errno } => write!(
                f,
                "cannot look inside ({errno}): run as root or as its owner"
            ),
            SocketDirKeepReason::Unprobed { errno } => write!(
                f,
                "cannot tell whether its socket is listening: connecting failed with {errno}"
            ),
            SocketDirKeepReason::Replaced => f.write_str("another directory took its name"),
        }
    }
}

/// One socket directory and what the scan found about it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SocketDirReport {
    /// The directory it is in.
    pub parent: PathBuf,
    /// Its checked name.
    pub name: SocketDirName,
    /// The user that owns it.
    pub owner_uid: u32,
    /// How long ago it was last changed (the later of mtime and ctime).
    pub age: Duration,
    /// For a resource sharer's directory, whether the process named in it
    /// exists; `None` for a manager's, whose name carries no pid.
    pub creator_alive: Option<bool>,
    /// The sockets found in it, by name, sorted; empty when it was not
    /// looked into.
    pub sockets: Vec<String>,
    /// Those of [`sockets`](Self::sockets) found listening.
    pub listening: Vec<String>,
    /// The first entry found in it that is not one of its sockets.
    pub unexpected: Option<String>,
    /// Why it is kept, or `None` for an orphan.
    pub keep: Option<SocketDirKeepReason>,
    pub(super) file: FileKey,
}

impl SocketDirReport {
    /// The directory's path.
    pub fn path(&self) -> PathBuf {
        self.parent.join(self.name.as_str())
    }

    /// Whether the scan found it orphaned.
    pub fn is_orphan(&self) -> bool {
        self.keep.is_none()
    }
}

/// An entry with a socket directory's name that the scan did not judge.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkippedSocketDir {
    /// The directory it is in.
    pub parent: PathBuf,
    /// Its name.
    pub name: SocketDirName,
    /// Why it was skipped.
    pub reason: SkipReason,
}
