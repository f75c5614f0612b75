//! Segments in `/dev/shm`, and private socket directories, left by
//! processes that are gone.
//!
//! The `file_system` strategy, torch's and ours, keeps every shared storage
//! in a named segment `/dev/shm/torch_<pid>_<random>_<counter>`, where
//! `<pid>` is the process that created it. The manager daemon unlinks a
//! client's segments once every client is gone; when the manager is killed
//! together with its clients (SIGKILL, the OOM killer), nobody does, and the
//! segments fill `/dev/shm` until reboot. [`scan`] finds them and
//! [`OrphanScan::remove_orphans`] removes them.
//!
//! The private socket directories of tensorshare processes that are gone
//! are found by [`scan_socket_dirs`] and removed by
//! [`SocketDirScan::remove_orphans`]: see [Socket
//! directories](#socket-directories).
//!
//! # What counts as an orphan
//!
//! An entry of the shared-memory directory is an orphan when all of these
//! hold, checked in this order:
//!
//! - its name parses as a [`SegmentName`]. Other names are not looked at at
//!   all, not even `stat`ed; an entry that is not a regular file (a symlink,
//!   a directory) is skipped and never followed;
//! - it belongs to this process's effective user. Another user's segment is
//!   kept ([`KeepReason::OtherUser`]) and not even opened, whoever runs the
//!   scan, root included: root could unlink it, but it is its owner's to
//!   reclaim;
//! - its creator is gone: `kill(pid, 0)` fails with `ESRCH`. `EPERM` means
//!   the process exists; a recycled pid keeps the segment too, erring on the
//!   safe side;
//! - no process seen in `/proc` holds it: no `/proc/<pid>/fd/*` refers to
//!   it, and no line of `/proc/<pid>/maps` maps it (a mapping whose fd was
//!   closed is the common case: torch maps and closes). Files are matched by
//!   device and inode, not by path, so a process in another mount
//!   namespace, a name shown as `(deleted)` and a directory other than
//!   `/dev/shm` all compare right. `/proc` entries vanish while the scan
//!   reads them; `ENOENT` and `ESRCH` there mean the process exited;
//! - it was last changed (the later of its mtime and ctime) at least
//!   [`ScanOptions::min_age`] ago, [`DEFAULT_MIN_AGE`] unless set. This grace
//!   covers the hand-off windows in which a live segment is held by no
//!   process at all: between a creator's `ftruncate` and its `mmap`, and
//!   while a receiver opens a segment whose sender just exited. It is longer
//!   than the 2 s in which the manager cleans up after its last client, so
//!   the two do not race for a segment that has just been freed;
//! - a memmap file is not marked by its sender as named by a message a
//!   receiver may still open, until a deadline still to come
//!   ([`FileLease::await_receivers_until`](crate::memmap::FileLease::await_receivers_until):
//!   torch's `from_file` would make a file of zeros in its place). A grace
//!   of zero overrides the mark; otherwise the file is kept
//!   ([`KeepReason::AwaitingReceivers`]);
//! - the kernel confirms that nothing has it open: the scan opens the file
//!   and takes a write lease on it (`fcntl(F_SETLEASE, F_WRLCK)`), which the
//!   kernel grants only when no other open file refers to it. An fd, a
//!   mapping whose fd was closed (the mapping keeps the open file) and an fd
//!   in flight on a Unix socket all count, whichever process, user or pid
//!   namespace they belong to. A refused lease keeps the segment
//!   ([`KeepReason::HeldUnseen`]);
//! - when the kernel cannot be asked (leases disabled, a file system
//!   without them), the view from `/proc` must be complete: a `/proc/<pid>`
//!   this user may not read (`EACCES`: another user's process, a
//!   non-dumpable one), or a
//!   `/proc` mounted with `hidepid` for a user other than root, leaves open
//!   whether some process holds the segment, so it is kept
//!   ([`KeepReason::Unverifiable`]) and the scan says which processes it
//!   could not see ([`OrphanScan::unreadable_processes`]). Kernel threads
//!   hold no files and are not counted.
//!
//! # Removal
//!
//! [`OrphanScan::remove_orphans`] looks again just before removing: one more
//! pass over `/proc` for the segments it is about to remove, then per
//! segment a fresh `lstat` (the same regular file, by device and inode, still
//! this user's and old enough), a fresh `kill(pid, 0)`, and the write lease
//! (taken on the opened file only when `fstat` shows the same owner), which
//! it holds while it unlinks: until the name is gone, another process cannot
//! open the file without the kernel first breaking the lease, and a broken
//! lease keeps the segment. It unlinks by the parsed name, relative to the
//! directory that was listed: that is what `shm_unlink` does for `/dev/shm`
//! (glibc and musl unlink `/dev/shm/<name>`), and it removes exactly the
//! entry that was checked also when the operator names another directory.
//!
//! # Memmap files
//!
//! The `memmap` strategy's files carry their creator's pid in their name
//! too ([`MemmapFileName`]), and a creator killed by SIGKILL leaves them, as
//! no receiver says when it is done with one. [`scan`] with
//! [`ScanOptions::memmap_dir`] judges them by the rules above, in the
//! directory given, and [`OrphanScan::remove_orphans`] removes them. Files
//! created to be kept (`tensorshare_kept_...`) do not parse as such names
//! and are never looked at.
//!
//! # Socket directories
//!
//! A socket bound to a path outlives a process killed by SIGKILL, and so
//! does the private directory it was made in. tensorshare's resource sharer
//! listens in Linux's abstract namespace, which leaves nothing behind, but
//! one told to listen on a path (`TENSORSHARE_SHARER_DIR`) makes
//! `tensorshare-sharer-<pid>-XXXXXXXX/listener-XXXXXXXX`, and the
//! shared-memory manager, which torch's clients must reach by path, makes
//! `tensorshare-shm-XXXXXX/manager.sock`. [`scan_socket_dirs`] finds the
//! ones whose process is gone and [`SocketDirScan::remove_orphans`] removes
//! them.
//!
//! ## What counts as an orphan socket directory
//!
//! An entry directly inside one of the scanned parent directories is an
//! orphan when all of these hold, checked in this order:
//!
//! - its name parses as a [`SocketDirName`]: a name only tensorshare makes.
//!   Other names, CPython's `pymp-XXXXXXXX` among them, are not looked at
//!   at all; those cannot be told from a live or dead Python process's own;
//! - it is a directory, not followed if it is a symlink;
//! - it belongs to this process's effective user: another user's is kept
//!   ([`SocketDirKeepReason::OtherUser`]) and not looked into, whoever runs
//!   the scan, root included;
//! - for a resource sharer's directory, the process named in it is gone
//!   (`kill(pid, 0)` fails with `ESRCH`; a recycled pid keeps it);
//! - it was last changed at least [`SocketDirScanOptions::min_age`] ago:
//!   a manager's directory names no process, and this covers the moment
//!   between making it and binding the socket;
//! - it holds nothing but sockets of the names its kind binds
//!   (`listener-XXXXXXXX`, `manager.sock`): anything else there is not
//!   ours to remove;
//! - no socket in it is listening: none is bound in `/proc/net/unix`, and
//!   connecting to each is refused (`ECONNREFUSED`), which is what the
//!   kernel answers for a socket file whose listener is gone, in whichever
//!   pid or network namespace it ran. Connecting is tried only for sockets
//!   `/proc/net/unix` does not list, so a live listener in this network
//!   namespace is never disturbed.
//!
//! Removal checks it all again, then removes the sockets and the directory.
//!
//! # Limits
//!
//! - A name that is only in flight, in a queue or a pipe, with every process
//!   that held the segment gone, is removed like any orphan: nothing on the
//!   system records it. torch's own manager unlinks such a segment too.
//! - A live creator in another pid namespace is invisible to `kill(pid, 0)`;
//!   while it has the segment open or mapped the kernel's check keeps it.
//!   Run the scan in the pid namespace of the processes that use the
//!   directory (on the host, or in the container that owns its `/dev/shm`).
//!
//! # Safety
//!
//! No `unsafe` code here: the lease is taken by the crate's private `lease`
//! module, whose own `# Safety` section says what makes each call sound.
//!
//! # Examples
//!
//! ```
//! use std::os::unix::fs::OpenOptionsExt;
//! use std::time::Duration;
//!
//! use tensorshare_strategies::file_system::SegmentName;
//! use tensorshare_strategies::services::orphans::{self, RemovalOutcome, ScanOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A segment named for a process that has exited, held by nobody.
//! let mut child = std::process::Command::new("true").spawn()?;
//! child.wait()?;
//! let name = format!("/torch_{}_{}_0", child.id(), std::process::id());
//! let name = SegmentName::parse(name.as_bytes())?;
//! let path = std::path::Path::new("/dev/shm").join(name.file_name());
//! std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
//!
//! // Look at this one name only, without the grace for fresh segments.
//! let options = ScanOptions::new().only([name.clone()]).min_age(Duration::ZERO);
//! let scan = orphans::scan(&options)?;
//! assert!(scan.segments()[0].is_orphan());
//!
//! let removals = scan.remove_orphans()?;
//! assert_eq!(removals[0].outcome, RemovalOutcome::Removed);
//! assert!(!path.exists());
//! # Ok(())
//! # }
//! ```

mod error;
mod holders;
mod lease;
mod listing;
mod orphan_name;
mod orphan_scan;
mod removal;
mod report;
mod socket_dirs;
mod verdict;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use error::{RemoveError, ScanError};
pub use orphan_name::OrphanName;
pub use orphan_scan::{OrphanScan, ScanOptions, scan};
pub use removal::{Removal, RemovalOutcome};
pub use report::{KeepReason, SegmentReport, SkipReason, SkippedEntry};
pub use socket_dirs::{
    SkippedSocketDir, SocketDirKeepReason, SocketDirOutcome, SocketDirRemoval,
    SocketDirRemoveError, SocketDirReport, SocketDirScan, SocketDirScanOptions, scan_socket_dirs,
};

#[cfg(doc)]
use crate::platform::memmap_file_name::MemmapFileName;
#[cfg(doc)]
use crate::platform::private_dir::SocketDirName;
#[cfg(doc)]
use crate::platform::segment_name::SegmentName;

/// Where Linux keeps POSIX shared-memory objects, `/dev/shm`: `shm_open`
/// names resolve here.
pub const DEFAULT_SHM_DIR: &str = crate::platform::segment_name::SHM_DIR;

/// How long after its last change a segment held by nobody is still left
/// alone: longer than the 2 s the manager waits before cleaning up.
pub const DEFAULT_MIN_AGE: Duration = Duration::from_secs(5);
