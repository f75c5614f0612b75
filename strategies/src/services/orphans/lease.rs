//! Whether a segment is open anywhere, asked of the kernel with a write
//! lease ([`crate::platform::lease`]) on the segment opened by its entry.

use std::os::fd::OwnedFd;

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, fstat};

use super::listing::{Entry, FileKey};
use super::orphan_name::OrphanName;
pub(super) use crate::platform::lease::Probe;
use crate::platform::lease::lease_exclusively;
use crate::platform::mapping::is_regular_file;

/// Opens `entry` and takes a write lease on it, which the kernel grants only
/// when no other open file refers to it.
pub(super) fn hold_exclusively<N: OrphanName>(dir: &OwnedFd, entry: &Entry<N>) -> Probe {
    let file = match openat(
        dir,
        entry.name.file_name(),
        // O_NONBLOCK: fail instead of waiting on another holder's lease.
        OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(file) => file,
        Err(Errno::ENOENT) => return Probe::Gone,
        // A symlink took the name.
        Err(Errno::ELOOP) => return Probe::Replaced,
        // Another process holds a lease on it.
        Err(Errno::EAGAIN) => return Probe::InUse,
        Err(errno) => return Probe::Unavailable(errno),
    };
    match fstat(&file) {
        Ok(stat)
            if is_regular_file(&stat)
                && FileKey::new(stat.st_dev, stat.st_ino) == entry.file
                && stat.st_uid == entry.owner_uid => {}
        Ok(_) => return Probe::Replaced,
        Err(errno) => return Probe::Unavailable(errno),
    }
    lease_exclusively(file)
}
