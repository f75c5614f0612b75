//! The marks a `memmap` file carries for the processes that share it and
//! for `gc`: user extended attributes, set and read by path. A filesystem
//! that keeps no user extended attributes keeps no mark; each reader says
//! what that means for it.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::io::Errno;

/// Set by a process on a file it received before it sends the file on.
const SENT_ON: &str = "user.tensorshare.sent_on";

/// Set by a sender on a file whose message a receiver may still have to
/// open: the deadline, in whole seconds since the epoch.
const AWAITS_RECEIVERS_UNTIL: &str = "user.tensorshare.awaits_receivers_until";

/// Marks the file at `path` as sent on by a process that did not create it.
/// `Ok` too where the filesystem keeps no such marks (`ENOTSUP`).
pub(crate) fn mark_sent_on(path: &Path) -> Result<(), Errno> {
    match rustix::fs::lsetxattr(path, SENT_ON, b"1", rustix::fs::XattrFlags::empty()) {
        Ok(()) | Err(Errno::NOTSUP) => Ok(()),
        Err(errno) => Err(errno),
    }
}

/// Whether the file at `path` was sent on by a process that did not create
/// it; `None` where the filesystem cannot tell.
pub(crate) fn sent_on(path: &Path) -> Option<bool> {
    match rustix::fs::lgetxattr(path, SENT_ON, &mut [0_u8; 8]) {
        Ok(_) | Err(Errno::RANGE) => Some(true),
        Err(Errno::NODATA) => Some(false),
        Err(_) => None,
    }
}

/// Marks the file at `path` as awaiting receivers until `seconds` after the
/// epoch; whether the mark was written.
pub(crate) fn mark_awaits_receivers_until(path: &Path, seconds: u64) -> bool {
    rustix::fs::lsetxattr(
        path,
        AWAITS_RECEIVERS_UNTIL,
        seconds.to_string().as_bytes(),
        rustix::fs::XattrFlags::empty(),
    )
    .is_ok()
}

/// Until when the file at `path` awaits the receivers of a message naming
/// it, as its sender marked it; `None` without a readable mark.
pub(crate) fn awaits_receivers_until(path: &Path) -> Option<SystemTime> {
    let mut value = [0_u8; 20];
    let len = rustix::fs::lgetxattr(path, AWAITS_RECEIVERS_UNTIL, &mut value).ok()?;
    let seconds: u64 = std::str::from_utf8(value.get(..len)?).ok()?.parse().ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
}
