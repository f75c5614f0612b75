//! Judging one socket directory by the rules of the [module
//! docs](crate::services::orphans#socket-directories), in their order.

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fstat, fstatat};

use super::probe::{Knock, is_bound, knock};
use super::report::{SocketDirKeepReason, SocketDirReport};
use crate::platform::errno_of;
use crate::platform::mapping::file_type;
use crate::platform::owner::is_own_uid;
use crate::platform::private_dir::{SocketDirKind, SocketDirName};
use crate::platform::process;
use crate::services::orphans::listing::{FileKey, file_type_name, last_change, read_dir_of};
use crate::services::orphans::report::SkipReason;

/// What judging one name gave.
pub(super) enum Lookup {
    Found(Judged),
    Skipped(SkipReason),
    Gone,
}

/// The facts about one directory, the verdict, and the directory opened
/// for its removal.
pub(super) struct Judged {
    pub(super) file: FileKey,
    owner_uid: u32,
    age: Duration,
    creator_alive: Option<bool>,
    pub(super) sockets: Vec<String>,
    listening: Vec<String>,
    unexpected: Option<String>,
    pub(super) keep: Option<SocketDirKeepReason>,
    pub(super) opened: Option<OwnedFd>,
}

impl Judged {
    pub(super) fn into_report(self, parent: &Path, name: SocketDirName) -> SocketDirReport {
        SocketDirReport {
            parent: parent.to_path_buf(),
            name,
            owner_uid: self.owner_uid,
            age: self.age,
            creator_alive: self.creator_alive,
            sockets: self.sockets,
            listening: self.listening,
            unexpected: self.unexpected,
            keep: self.keep,
            file: self.file,
        }
    }
}

/// Judges `name` in `parent` by the rules of the module docs, in their
/// order.
pub(super) fn judge(
    parent: &OwnedFd,
    name: &SocketDirName,
    min_age: Duration,
    now: SystemTime,
    bound: &HashSet<Vec<u8>>,
) -> Lookup {
    let stat = match fstatat(parent, name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(Errno::ENOENT) => return Lookup::Gone,
        Err(errno) => return Lookup::Skipped(SkipReason::Stat { errno }),
    };
    if file_type(&stat) != SFlag::S_IFDIR {
        return Lookup::Skipped(SkipReason::NotDirectory {
            file_type: file_type_name(file_type(&stat)),
        });
    }
    let age = now
        .duration_since(last_change(&stat))
        .unwrap_or(Duration::ZERO);
    let mut judged = Judged {
        file: FileKey::new(stat.st_dev, stat.st_ino),
        owner_uid: stat.st_uid,
        age,
        creator_alive: name.creator_pid().map(process::exists),
        sockets: Vec::new(),
        listening: Vec::new(),
        unexpected: None,
        keep: None,
        opened: None,
    };
    // Root included, before anything inside is looked at: a socket
    // directory of another user's is that user's to reclaim.
    if !is_own_uid(stat.st_uid) {
        judged.keep = Some(SocketDirKeepReason::OtherUser { uid: stat.st_uid });
        return Lookup::Found(judged);
    }
    if judged.creator_alive == Some(true) {
        judged.keep = Some(SocketDirKeepReason::CreatorAlive);
        return Lookup::Found(judged);
    }
    if age < min_age {
        judged.keep = Some(SocketDirKeepReason::Recent { age });
        return Lookup::Found(judged);
    }
    let dir = match openat(
        parent,
        name.as_str(),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(dir) => dir,
        Err(Errno::ENOENT) => return Lookup::Gone,
        Err(Errno::ENOTDIR | Errno::ELOOP) => {
            judged.keep = Some(SocketDirKeepReason::Replaced);
            return Lookup::Found(judged);
        }
        Err(errno) => {
            judged.keep = Some(SocketDirKeepReason::Unreadable { errno });
            return Lookup::Found(judged);
        }
    };
    match fstat(&dir) {
        Ok(opened) if FileKey::new(opened.st_dev, opened.st_ino) == judged.file => {}
        Ok(_) => {
            judged.keep = Some(SocketDirKeepReason::Replaced);
            return Lookup::Found(judged);
        }
        Err(errno) => {
            judged.keep = Some(SocketDirKeepReason::Unreadable { errno });
            return Lookup::Found(judged);
        }
    }
    match list_sockets(&dir, name.kind()) {
        Ok(Contents::Sockets(sockets)) => judged.sockets = sockets,
        Ok(Contents::Unexpected(entry)) => {
            judged.unexpected = Some(entry);
            judged.keep = Some(SocketDirKeepReason::UnexpectedEntry);
            return Lookup::Found(judged);
        }
        Err(errno) => {
            judged.keep = Some(SocketDirKeepReason::Unreadable { errno });
            return Lookup::Found(judged);
        }
    }
    let mut vanished = Vec::new();
    for socket in &judged.sockets {
        if is_bound(bound, name, socket) {
            judged.listening.push(socket.clone());
            continue;
        }
        match knock(&dir, socket) {
            Knock::Refused => {}
            Knock::Listening => judged.listening.push(socket.clone()),
            Knock::Gone => vanished.push(socket.clone()),
            Knock::Failed(errno) => {
                judged.keep = Some(SocketDirKeepReason::Unprobed { errno });
            }
        }
    }
    judged.sockets.retain(|socket| !vanished.contains(socket));
    if !judged.listening.is_empty() {
        judged.keep = Some(SocketDirKeepReason::Listening);
    }
    judged.opened = Some(dir);
    Lookup::Found(judged)
}

/// What a socket directory holds.
enum Contents {
    /// Only sockets of the names its kind binds, sorted.
    Sockets(Vec<String>),
    /// This entry, which is not one of them.
    Unexpected(String),
}

fn list_sockets(dir: &OwnedFd, kind: SocketDirKind) -> Result<Contents, Errno> {
    let entries = read_dir_of(dir).map_err(|e| errno_of(&e))?;
    let mut sockets = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| errno_of(&e))?;
        let file_name = entry.file_name();
        let shown = file_name.to_string_lossy().into_owned();
        if !kind.is_socket_name(file_name.as_bytes()) {
            return Ok(Contents::Unexpected(shown));
        }
        match fstatat(dir, file_name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) if file_type(&stat) == SFlag::S_IFSOCK => sockets.push(shown),
            Ok(_) => return Ok(Contents::Unexpected(shown)),
            Err(Errno::ENOENT) => {}
            Err(errno) => return Err(errno),
        }
    }
    sockets.sort();
    Ok(Contents::Sockets(sockets))
}
