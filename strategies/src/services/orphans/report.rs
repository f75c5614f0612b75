//! What the scan says about each entry: kept and why, or skipped and why.

use std::fmt;
use std::time::Duration;

use nix::errno::Errno;

use super::listing::FileKey;
use super::orphan_name::OrphanName;
use crate::platform::segment_name::SegmentName;

#[cfg(doc)]
use super::{OrphanScan, ScanOptions};

/// Why a segment is not an orphan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeepReason {
    /// Another user owns it: the scan removes only its own user's
    /// segments, root's included, and looks no further at others'.
    OtherUser {
        /// The owner's uid.
        uid: u32,
    },
    /// The process named in the segment's name exists (or its pid was
    /// recycled: the scan cannot tell, and keeps the segment).
    CreatorAlive,
    /// A live process has it open or mapped: [`SegmentReport::holders`].
    Held,
    /// No process seen in `/proc` holds it, but the kernel reports it open
    /// or mapped: by a process this user may not inspect, one in another
    /// pid namespace, or an fd in flight on a Unix socket.
    HeldUnseen,
    /// It was changed less than [`ScanOptions::min_age`] ago.
    Recent {
        /// How long ago it was last changed.
        age: Duration,
    },
    /// Its sender marked it as named by a message a receiver may still
    /// open ([`FileLease::await_receivers_until`](crate::memmap::FileLease::await_receivers_until)),
    /// for this much longer; a [`ScanOptions::min_age`] of zero overrides
    /// the mark.
    AwaitingReceivers {
        /// How long the mark holds yet.
        left: Duration,
    },
    /// The kernel could not be asked whether it is open, and some processes
    /// could not be inspected, so one of them may hold it:
    /// [`OrphanScan::unreadable_processes`].
    Unverifiable {
        /// Why the kernel could not be asked: opening the file or taking the
        /// lease failed with this.
        errno: Errno,
    },
    /// Found at removal: another file took the name after the scan.
    Replaced,
}

impl fmt::Display for KeepReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeepReason::OtherUser { uid } => write!(
                f,
                "it belongs to uid {uid}, and only this user's own segments are removed"
            ),
            KeepReason::CreatorAlive => f.write_str("its creator is alive"),
            KeepReason::Held => f.write_str("a live process holds it"),
            KeepReason::HeldUnseen => {
                f.write_str("open or mapped by a process that cannot be inspected")
            }
            KeepReason::Recent { age } => {
                write!(f, "changed {:.1} s ago", age.as_secs_f64())
            }
            KeepReason::AwaitingReceivers { left } => write!(
                f,
                "its sender marked it as named by a message a receiver may still open, for {:.0} s \
                 more",
                left.as_secs_f64()
            ),
            KeepReason::Unverifiable { errno } => write!(
                f,
                "some processes could not be inspected and may hold it, and the kernel could not \
                 be asked ({errno})"
            ),
            KeepReason::Replaced => f.write_str("another file took its name after the scan"),
        }
    }
}

/// One segment (or other file `N` names) of the directory and what the
/// scan found about it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SegmentReport<N = SegmentName> {
    /// Its checked name.
    pub name: N,
    /// Its size in bytes (`st_size`): for torch's segments the storage plus
    /// the 64-byte refcount header.
    pub size: u64,
    /// The user that owns it.
    pub owner_uid: u32,
    /// How long ago it was last changed (the later of mtime and ctime).
    pub age: Duration,
    /// Whether the process named in its name exists.
    pub creator_alive: bool,
    /// The live processes seen holding it open or mapped, ascending.
    pub holders: Vec<u32>,
    /// Why it is kept, or `None` for an orphan.
    pub keep: Option<KeepReason>,
    pub(super) file: FileKey,
}

impl<N: OrphanName> SegmentReport<N> {
    /// The pid of the process that created it, from its name.
    pub fn creator_pid(&self) -> u32 {
        self.name.creator_pid()
    }

    /// Whether the scan found it orphaned.
    pub fn is_orphan(&self) -> bool {
        self.keep.is_none()
    }
}

/// An entry with a segment's (or another recognized) name that the scan
/// did not judge.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkippedEntry<N = SegmentName> {
    /// Its name.
    pub name: N,
    /// Why it was skipped.
    pub reason: SkipReason,
}

/// Why an entry with a segment's name was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkipReason {
    /// A symlink, directory, fifo, socket or device: never followed, never
    /// removed.
    NotRegularFile {
        /// What it is instead: `symlink`, `directory`, `fifo`, `socket`,
        /// `character device`, `block device` or `unknown`.
        file_type: &'static str,
    },
    /// A socket directory's name on something that is not a directory: a
    /// symlink, file, fifo, socket or device; never followed, never removed.
    NotDirectory {
        /// What it is instead: `symlink`, `regular file`, `fifo`, `socket`,
        /// `character device`, `block device` or `unknown`.
        file_type: &'static str,
    },
    /// `lstat` failed.
    Stat {
        /// What it failed with.
        errno: Errno,
    },
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::NotRegularFile { file_type } => {
                write!(f, "not a regular file ({file_type}); left alone")
            }
            SkipReason::NotDirectory { file_type } => {
                write!(f, "not a directory ({file_type}); left alone")
            }
            SkipReason::Stat { errno } => write!(f, "cannot stat it ({errno}); left alone"),
        }
    }
}
