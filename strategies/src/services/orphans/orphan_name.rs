//! The names an orphan scan recognizes: each says which process created
//! its file.

use std::ffi::OsStr;
use std::fmt;
use std::hash::Hash;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use nix::errno::Errno;

use super::error::ScanError;
use crate::platform::memmap_file_name::MemmapFileName;
use crate::platform::segment_name::SegmentName;

/// The name of a file that one process created and that says which: what
/// [`scan`](super::scan) looks for in its directory. Entries with other
/// names belong to other programs and are never looked at.
pub trait OrphanName: Clone + Ord + Hash + fmt::Debug + fmt::Display {
    /// The name of the directory entry `name`, if it is one of these.
    fn from_entry(name: &OsStr) -> Option<Self>;

    /// The entry's name in its directory.
    fn file_name(&self) -> &str;

    /// The pid of the process that created the file.
    fn creator_pid(&self) -> u32;

    /// The error for a directory of these that cannot be opened.
    fn open_dir_error(path: PathBuf, errno: Errno) -> ScanError;

    /// The error for a directory of these that cannot be listed.
    fn list_dir_error(path: PathBuf, errno: Errno) -> ScanError;

    /// Until when the file at `path`, one of these, awaits the receivers of
    /// a message naming it, as its sender marked it; `None` for names whose
    /// files carry no such mark.
    fn awaits_receivers_until(_path: &Path) -> Option<SystemTime> {
        None
    }
}

impl OrphanName for SegmentName {
    fn from_entry(name: &OsStr) -> Option<Self> {
        let name = name.to_str()?;
        SegmentName::parse(format!("/{name}").as_bytes()).ok()
    }

    fn file_name(&self) -> &str {
        SegmentName::file_name(self)
    }

    fn creator_pid(&self) -> u32 {
        SegmentName::creator_pid(self)
    }

    fn open_dir_error(path: PathBuf, errno: Errno) -> ScanError {
        ScanError::OpenShmDir { path, errno }
    }

    fn list_dir_error(path: PathBuf, errno: Errno) -> ScanError {
        ScanError::ListShmDir { path, errno }
    }
}

impl OrphanName for MemmapFileName {
    fn from_entry(name: &OsStr) -> Option<Self> {
        MemmapFileName::parse(name.to_str()?).ok()
    }

    fn file_name(&self) -> &str {
        MemmapFileName::file_name(self)
    }

    fn creator_pid(&self) -> u32 {
        MemmapFileName::creator_pid(self)
    }

    fn open_dir_error(path: PathBuf, errno: Errno) -> ScanError {
        ScanError::OpenMemmapDir { path, errno }
    }

    fn list_dir_error(path: PathBuf, errno: Errno) -> ScanError {
        ScanError::ListMemmapDir { path, errno }
    }

    fn awaits_receivers_until(path: &Path) -> Option<SystemTime> {
        crate::platform::memmap_marks::awaits_receivers_until(path)
    }
}
