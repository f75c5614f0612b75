//! Listing the scanned directory: which entries have a recognized name,
//! and what `lstat` says about each.

use std::fs::ReadDir;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::stat::{FileStat, SFlag, fstatat, major, minor};

use super::error::ScanError;
use super::orphan_name::OrphanName;
use super::orphan_scan::ScanOptions;
use super::report::{SkipReason, SkippedEntry};
use crate::platform::errno_of;
use crate::platform::mapping::{file_type, is_regular_file};

/// A file's identity as `/proc/<pid>/maps` shows it: device major and
/// minor, and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct FileKey {
    pub(super) major: u64,
    pub(super) minor: u64,
    pub(super) ino: u64,
}

impl FileKey {
    pub(super) fn new(dev: u64, ino: u64) -> Self {
        Self {
            major: major(dev),
            minor: minor(dev),
            ino,
        }
    }
}

/// A regular file with a recognized name.
pub(super) struct Entry<N> {
    pub(super) name: N,
    pub(super) file: FileKey,
    pub(super) size: u64,
    pub(super) owner_uid: u32,
    pub(super) changed: SystemTime,
}

pub(super) enum Lookup<N> {
    Found(Entry<N>),
    NotRegular(&'static str),
    Gone,
}

/// `lstat`s `name` in `dir`, never following a symlink.
pub(super) fn stat_entry<N: OrphanName>(dir: &OwnedFd, name: &N) -> Result<Lookup<N>, Errno> {
    let stat = match fstatat(dir, name.file_name(), AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(Errno::ENOENT) => return Ok(Lookup::Gone),
        Err(errno) => return Err(errno),
    };
    if !is_regular_file(&stat) {
        return Ok(Lookup::NotRegular(file_type_name(file_type(&stat))));
    }
    Ok(Lookup::Found(Entry {
        name: name.clone(),
        file: FileKey::new(stat.st_dev, stat.st_ino),
        size: u64::try_from(stat.st_size).unwrap_or(0),
        owner_uid: stat.st_uid,
        changed: last_change(&stat),
    }))
}

pub(super) fn file_type_name(file_type: SFlag) -> &'static str {
    match file_type {
        SFlag::S_IFLNK => "symlink",
        SFlag::S_IFDIR => "directory",
        SFlag::S_IFREG => "regular file",
        SFlag::S_IFIFO => "fifo",
        SFlag::S_IFSOCK => "socket",
        SFlag::S_IFCHR => "character device",
        SFlag::S_IFBLK => "block device",
        _ => "unknown",
    }
}

/// The later of mtime and ctime: ctime cannot be set back by `utimes`.
pub(super) fn last_change(stat: &FileStat) -> SystemTime {
    let at = |secs: i64, nsecs: i64| {
        let secs = u64::try_from(secs).unwrap_or(0);
        let nsecs = u32::try_from(nsecs).unwrap_or(0).min(999_999_999);
        UNIX_EPOCH + Duration::new(secs, nsecs)
    };
    at(stat.st_mtime, stat.st_mtime_nsec).max(at(stat.st_ctime, stat.st_ctime_nsec))
}

pub(super) struct Listing<N> {
    pub(super) entries: Vec<Entry<N>>,
    pub(super) skipped: Vec<SkippedEntry<N>>,
    pub(super) missing: Vec<N>,
}

impl<N: OrphanName> Listing<N> {
    /// Records `name` by what `lstat` says of it; `false` when it is not
    /// there.
    fn add(&mut self, dir: &OwnedFd, name: N) -> bool {
        match stat_entry(dir, &name) {
            Ok(Lookup::Found(entry)) => self.entries.push(entry),
            Ok(Lookup::NotRegular(file_type)) => self.skipped.push(SkippedEntry {
                name,
                reason: SkipReason::NotRegularFile { file_type },
            }),
            Ok(Lookup::Gone) => return false,
            Err(errno) => self.skipped.push(SkippedEntry {
                name,
                reason: SkipReason::Stat { errno },
            }),
        }
        true
    }
}

pub(super) fn list_entries<N: OrphanName>(
    dir: &OwnedFd,
    options: &ScanOptions<N>,
) -> Result<Listing<N>, ScanError> {
    let mut listing = Listing {
        entries: Vec::new(),
        skipped: Vec::new(),
        missing: Vec::new(),
    };
    if let Some(only) = options.only_names() {
        // Named entries are looked up by name: the rest of the directory
        // need not be read.
        for name in only {
            if !listing.add(dir, name.clone()) {
                listing.missing.push(name.clone());
            }
        }
    } else {
        let list_error =
            |e: io::Error| N::list_dir_error(options.dir_path().to_path_buf(), errno_of(&e));
        let read_dir = read_dir_of(dir).map_err(list_error)?;
        for dir_entry in read_dir {
            let dir_entry = dir_entry.map_err(list_error)?;
            // Anything else in the directory belongs to other programs; an
            // entry that vanished since the listing is not reported.
            if let Some(name) = N::from_entry(&dir_entry.file_name()) {
                listing.add(dir, name);
            }
        }
    }
    listing.entries.sort_by(|a, b| a.name.cmp(&b.name));
    listing.skipped.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(listing)
}

/// Lists the directory open as `dir` through its fd, so that the listing
/// and the `lstat`s relative to `dir` see one directory, whatever its path
/// names by now.
pub(super) fn read_dir_of(dir: &OwnedFd) -> io::Result<ReadDir> {
    std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
}
