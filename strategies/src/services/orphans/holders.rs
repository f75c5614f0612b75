//! Finding in `/proc` the live processes that hold a segment open or mapped.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use nix::errno::Errno;
use nix::unistd::geteuid;

use super::error::ScanError;
use super::listing::FileKey;
use crate::platform::errno_of;
use crate::platform::process::ProcStat;

/// `PF_KTHREAD` in the flags field of `/proc/<pid>/stat`.
const PF_KTHREAD: u64 = 0x0020_0000;

/// Who holds which of the target files, and which processes could not be
/// looked at.
pub(super) struct HolderScan {
    pub(super) held: HashMap<FileKey, BTreeSet<u32>>,
    pub(super) unreadable: BTreeSet<u32>,
    pub(super) proc_hides_processes: bool,
}

impl HolderScan {
    /// Whether some process may hold a file without the scan seeing it.
    pub(super) fn incomplete(&self) -> bool {
        self.proc_hides_processes || !self.unreadable.is_empty()
    }
}

/// How looking at one process went.
#[derive(Debug, PartialEq, Eq)]
enum Visit {
    Seen,
    /// It exited: it holds nothing.
    Gone,
    /// This user may not look.
    Unreadable,
}

impl Visit {
    fn of(error: &io::Error) -> Self {
        match errno_of(error) {
            Errno::ENOENT | Errno::ESRCH => Visit::Gone,
            // EACCES and EPERM above all; anything else is no better known.
            _ => Visit::Unreadable,
        }
    }
}

/// Walks `/proc` once, looking for fds and mappings of the target files,
/// given by their names in their directory and their identities.
pub(super) fn scan_holders(targets: &[(&str, FileKey)]) -> Result<HolderScan, ScanError> {
    let mut scan = HolderScan {
        held: HashMap::new(),
        unreadable: BTreeSet::new(),
        proc_hides_processes: proc_hides_processes(),
    };
    if targets.is_empty() {
        return Ok(scan);
    }
    let by_name: HashMap<&[u8], FileKey> = targets
        .iter()
        .map(|(name, key)| (name.as_bytes(), *key))
        .collect();
    let keys: HashSet<FileKey> = targets.iter().map(|(_, key)| *key).collect();
    let list_error = |e: io::Error| ScanError::ListProc {
        errno: errno_of(&e),
    };
    for proc_entry in std::fs::read_dir("/proc").map_err(list_error)? {
        let proc_entry = proc_entry.map_err(list_error)?;
        let Some(pid) = std::str::from_utf8(proc_entry.file_name().as_bytes())
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let mut found = HashSet::new();
        let fds = visit_fds(pid, &by_name, &mut found);
        let maps = if fds == Visit::Gone {
            Visit::Gone
        } else {
            visit_maps(pid, &keys, &mut found)
        };
        for key in found {
            scan.held.entry(key).or_default().insert(pid);
        }
        if (fds == Visit::Unreadable || maps == Visit::Unreadable) && !is_kernel_thread(pid) {
            scan.unreadable.insert(pid);
        }
    }
    Ok(scan)
}

/// The target files `pid` has open, by the last component of each fd's
/// link confirmed by device and inode.
fn visit_fds(pid: u32, by_name: &HashMap<&[u8], FileKey>, found: &mut HashSet<FileKey>) -> Visit {
    let fd_dir = PathBuf::from(format!("/proc/{pid}/fd"));
    let entries = match std::fs::read_dir(&fd_dir) {
        Ok(entries) => entries,
        Err(e) => return Visit::of(&e),
    };
    let mut visit = Visit::Seen;
    for fd_entry in entries {
        let fd_entry = match fd_entry {
            Ok(fd_entry) => fd_entry,
            Err(e) => return Visit::of(&e),
        };
        let link_path = fd_dir.join(fd_entry.file_name());
        let target = match std::fs::read_link(&link_path) {
            Ok(target) => target,
            Err(e) => {
                // Gone: the fd was closed meanwhile.
                if Visit::of(&e) == Visit::Unreadable {
                    visit = Visit::Unreadable;
                }
                continue;
            }
        };
        let Some(key) = fd_link_file_name(target.as_os_str().as_bytes())
            .and_then(|file_name| by_name.get(file_name))
        else {
            continue;
        };
        // Only links named like a target are followed, so the scan never
        // touches another filesystem (a hung NFS mount would block `stat`).
        match std::fs::metadata(&link_path) {
            Ok(meta) if FileKey::new(meta.dev(), meta.ino()) == *key => {
                found.insert(*key);
            }
            Ok(_) => {}
            Err(e) if Visit::of(&e) == Visit::Gone => {}
            // The name matches and the file cannot be told apart: assume it
            // is the segment.
            Err(_) => {
                found.insert(*key);
            }
        }
    }
    visit
}

/// The last path component of an fd link, without the ` (deleted)` the
/// kernel appends to unlinked files.
pub(super) fn fd_link_file_name(target: &[u8]) -> Option<&[u8]> {
    let target = target.strip_suffix(b" (deleted)").unwrap_or(target);
    target.rsplit(|b| *b == b'/').next()
}

/// The target files `pid` maps.
fn visit_maps(pid: u32, keys: &HashSet<FileKey>, found: &mut HashSet<FileKey>) -> Visit {
    let maps = match std::fs::read(format!("/proc/{pid}/maps")) {
        Ok(maps) => maps,
        Err(e) => return Visit::of(&e),
    };
    for line in maps.split(|b| *b == b'\n') {
        if let Some(key) = maps_line_file(line).filter(|key| keys.contains(key)) {
            found.insert(key);
        }
    }
    Visit::Seen
}

/// The file a `/proc/<pid>/maps` line maps: `address perms offset
/// major:minor inode [path]`, device numbers in hex. `None` for anonymous
/// mappings and lines of another shape.
pub(super) fn maps_line_file(line: &[u8]) -> Option<FileKey> {
    let mut fields = line.split(|b| *b == b' ').filter(|field| !field.is_empty());
    let _address = fields.next()?;
    let _perms = fields.next()?;
    let _offset = fields.next()?;
    let dev = std::str::from_utf8(fields.next()?).ok()?;
    let ino = std::str::from_utf8(fields.next()?).ok()?;
    let (dev_major, dev_minor) = dev.split_once(':')?;
    let key = FileKey {
        major: u64::from_str_radix(dev_major, 16).ok()?,
        minor: u64::from_str_radix(dev_minor, 16).ok()?,
        ino: ino.parse().ok()?,
    };
    (key.ino != 0).then_some(key)
}

/// Whether `pid` is a kernel thread, which holds no files. Unknown counts
/// as no.
pub(super) fn is_kernel_thread(pid: u32) -> bool {
    ProcStat::of(pid).is_some_and(|stat| stat.has_flag(PF_KTHREAD))
}

/// Whether `/proc` hides other users' processes from this one.
fn proc_hides_processes() -> bool {
    if geteuid().is_root() {
        return false;
    }
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return false;
    };
    mounts.lines().any(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        fields.get(1) == Some(&"/proc")
            && fields.get(2) == Some(&"proc")
            && fields.get(3).is_some_and(|options| {
                options.split(',').any(|option| {
                    option
                        .strip_prefix("hidepid=")
                        .is_some_and(|value| value != "0" && value != "off")
                })
            })
    })
}
