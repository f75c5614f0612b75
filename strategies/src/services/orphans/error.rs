//! Why a scan or a removal failed.

use std::path::PathBuf;

use nix::errno::Errno;

use crate::platform::segment_name::SegmentName;

#[cfg(doc)]
use super::{OrphanScan, scan};

/// Why [`scan`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScanError {
    /// The shared-memory directory cannot be opened.
    #[error(
        "cannot open the shared-memory directory {} ({errno}): {}",
        path.display(),
        open_dir_hint(*errno)
    )]
    OpenShmDir {
        /// The directory.
        path: PathBuf,
        /// What `open` failed with.
        errno: Errno,
    },
    /// Listing the shared-memory directory failed.
    #[error(
        "cannot list the shared-memory directory {} ({errno}): check that this user may read it, \
         or run as root",
        path.display()
    )]
    ListShmDir {
        /// The directory.
        path: PathBuf,
        /// What reading it failed with.
        errno: Errno,
    },
    /// The memmap directory cannot be opened.
    #[error(
        "cannot open the memmap directory {} ({errno}): name the directory the memmap senders \
         used (`--memmap-dir`, or their TMPDIR)",
        path.display()
    )]
    OpenMemmapDir {
        /// The directory.
        path: PathBuf,
        /// What `open` failed with.
        errno: Errno,
    },
    /// Listing the memmap directory failed.
    #[error(
        "cannot list the memmap directory {} ({errno}): check that this user may read it, or run \
         as root",
        path.display()
    )]
    ListMemmapDir {
        /// The directory.
        path: PathBuf,
        /// What reading it failed with.
        errno: Errno,
    },
    /// `/proc` cannot be listed, so nothing can be said about who holds a
    /// segment.
    #[error(
        "cannot list /proc ({errno}): finding orphaned segments needs procfs at /proc to see which \
         processes hold them; mount it (`mount -t proc proc /proc`) and run again"
    )]
    ListProc {
        /// What listing `/proc` failed with.
        errno: Errno,
    },
    /// A directory to look for socket directories in cannot be opened.
    #[error(
        "cannot open {} to look for socket directories ({errno}): {}",
        path.display(),
        open_parent_hint(*errno)
    )]
    OpenSocketParent {
        /// The directory.
        path: PathBuf,
        /// What `open` failed with.
        errno: Errno,
    },
    /// Listing a directory to look for socket directories in failed.
    #[error(
        "cannot list {} to look for socket directories ({errno}): check that this user may read \
         it, or run as root",
        path.display()
    )]
    ListSocketParent {
        /// The directory.
        path: PathBuf,
        /// What reading it failed with.
        errno: Errno,
    },
}

fn open_parent_hint(errno: Errno) -> &'static str {
    match errno {
        Errno::ENOENT => "no such directory: name the TMPDIR the processes ran with",
        Errno::ENOTDIR => "not a directory: name the TMPDIR the processes ran with",
        Errno::EACCES => "permission denied: run as a user who may read it, or as root",
        _ => "check the path and run again",
    }
}

fn open_dir_hint(errno: Errno) -> &'static str {
    match errno {
        Errno::ENOENT => {
            "no such directory: name the directory where this system keeps POSIX \
                          shared memory"
        }
        Errno::ENOTDIR => {
            "not a directory: name the directory where this system keeps POSIX \
                           shared memory"
        }
        Errno::EACCES => "permission denied: run as a user who may read it, or as root",
        _ => "check the path and run again",
    }
}

/// Why an orphan could not be removed; `N` names it, a segment's name by
/// default.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RemoveError<N = SegmentName> {
    /// This user may not unlink its own file: the directory does not let it
    /// (another user's files are never removed, so never reach this).
    #[error(
        "cannot remove {name}: permission denied ({errno}), though it belongs to this user (uid \
         {owner_uid}): check that this user may write to its directory"
    )]
    PermissionDenied {
        /// The file.
        name: N,
        /// Its owner.
        owner_uid: u32,
        /// `EPERM` or `EACCES`.
        errno: Errno,
    },
    /// `unlinkat` failed for another reason.
    #[error(
        "cannot remove {name} ({errno}): it is left in place; check the directory and run again"
    )]
    Unlink {
        /// The file.
        name: N,
        /// What `unlinkat` failed with.
        errno: Errno,
    },
    /// The second look before removal could not `lstat` it.
    #[error(
        "cannot check {name} again before removing it ({errno}): it is left in place; run again"
    )]
    Recheck {
        /// The file.
        name: N,
        /// What `lstat` failed with.
        errno: Errno,
    },
}
