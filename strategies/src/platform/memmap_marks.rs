//! The marks a `memmap` file carries for the processes that share it and
//! for `gc`: user extended attributes, set and read by path. A filesystem
//! that keeps no user extended attributes keeps no mark; each reader says
//! what that means for it.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::os::fd::AsFd;

use rustix::io::Errno;

use crate::platform::unique_name::random_u64;

/// Set by a process on a file it received before it sends the file on.
const SENT_ON: &str = "user.tensorshare.sent_on";

/// Set by a sender on a file whose message a receiver may still have to
/// open: the deadline, in whole seconds since the epoch.
const AWAITS_RECEIVERS_UNTIL: &str = "user.tensorshare.awaits_receivers_until";

/// Set by the process that created a file, to a value no other file gets:
/// which file the path names now, when a later file may carry the freed
/// inode number and a birth time from the same clock tick.
const CREATED_AS: &str = "user.tensorshare.created_as";

/// What [`tag_created`] wrote on a file, to tell it from any other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CreationTag([u8; 16]);

/// Writes a tag no other file carries on the file `created` has open;
/// `None` where the filesystem keeps no user extended attributes or
/// refuses this one, and the file is then told apart by its identity and
/// birth time alone.
pub(crate) fn tag_created(created: impl AsFd) -> Option<CreationTag> {
    let mut tag = [0_u8; 16];
    if getrandom::fill(&mut tag).is_err() {
        // As for names: without an OS random source, the per-process
        // fallback of `random_u64`.
        tag[..8].copy_from_slice(&random_u64().to_ne_bytes());
        tag[8..].copy_from_slice(&random_u64().to_ne_bytes());
    }
    rustix::fs::fsetxattr(created, CREATED_AS, &tag, rustix::fs::XattrFlags::CREATE)
        .ok()
        .map(|()| CreationTag(tag))
}

/// Whether the file at `path` carries `tag`: `false` for a file without
/// one, with another, or that cannot be read.
pub(crate) fn carries_tag(path: &Path, tag: CreationTag) -> bool {
    let mut value = [0_u8; 16];
    rustix::fs::lgetxattr(path, CREATED_AS, &mut value) == Ok(value.len()) && value == tag.0
}

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
