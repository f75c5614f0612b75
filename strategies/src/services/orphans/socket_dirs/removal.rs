//! Removing the orphans a scan found, each judged again just before.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::SystemTime;

use nix::errno::Errno;
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::SocketDirScan;
use super::judge::{Judged, Lookup, judge};
use super::probe::bound_socket_paths;
use super::report::{SocketDirKeepReason, SocketDirReport};
use crate::platform::private_dir::SocketDirName;

/// What [`SocketDirScan::remove_orphans`] did with one orphan.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SocketDirRemoval {
    /// The directory it was in.
    pub parent: PathBuf,
    /// The directory.
    pub name: SocketDirName,
    /// What happened.
    pub outcome: SocketDirOutcome,
}

/// What happened to one orphaned socket directory at removal.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SocketDirOutcome {
    /// Its sockets and the directory were removed.
    Removed,
    /// The second look found it is not an orphan after all; it was left.
    Kept(SocketDirKeepReason),
    /// It was gone already.
    Vanished,
    /// Removing it failed; what is left of it is still there.
    Failed(SocketDirRemoveError),
}

/// Why an orphaned socket directory could not be removed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot remove {path} ({errno}): it is left in place; {}",
    remove_hint(*errno)
)]
#[non_exhaustive]
pub struct SocketDirRemoveError {
    /// The directory, or the socket in it that could not be removed.
    pub path: PathBuf,
    /// What `unlinkat` failed with.
    pub errno: Errno,
}

fn remove_hint(errno: Errno) -> &'static str {
    match errno {
        Errno::EPERM | Errno::EACCES => "run as root or as its owner",
        _ => "check the directory and run again",
    }
}

impl SocketDirScan {
    /// Removes every orphan of this scan, judging each again just before:
    /// a fresh `/proc/net/unix`, `lstat`, `kill(pid, 0)`, listing and
    /// connection to each socket. Then it unlinks the sockets and the
    /// directory. One that is no longer an orphan is kept and reported with
    /// the reason.
    pub fn remove_orphans(&self) -> Vec<SocketDirRemoval> {
        let bound = bound_socket_paths();
        let now = SystemTime::now();
        let mut removals = Vec::new();
        for orphan in self.orphans() {
            // `parents` holds the fd of each of the options' parent paths,
            // in their order.
            let Some((_, parent)) = self
                .options
                .parents
                .iter()
                .zip(&self.parents)
                .find(|(path, _)| **path == orphan.parent)
            else {
                continue;
            };
            let outcome = match judge(parent, &orphan.name, self.options.min_age, now, &bound) {
                Lookup::Gone => SocketDirOutcome::Vanished,
                Lookup::Skipped(_) => SocketDirOutcome::Kept(SocketDirKeepReason::Replaced),
                Lookup::Found(judged) if judged.file != orphan.file => {
                    SocketDirOutcome::Kept(SocketDirKeepReason::Replaced)
                }
                Lookup::Found(Judged {
                    keep: Some(reason), ..
                }) => SocketDirOutcome::Kept(reason),
                Lookup::Found(judged) => remove(parent, orphan, &judged),
            };
            removals.push(SocketDirRemoval {
                parent: orphan.parent.clone(),
                name: orphan.name.clone(),
                outcome,
            });
        }
        removals
    }
}

/// Unlinks the sockets `judged` found, then the directory.
fn remove(parent: &OwnedFd, orphan: &SocketDirReport, judged: &Judged) -> SocketDirOutcome {
    let Some(dir) = &judged.opened else {
        return SocketDirOutcome::Kept(SocketDirKeepReason::Replaced);
    };
    let failed =
        |path: PathBuf, errno| SocketDirOutcome::Failed(SocketDirRemoveError { path, errno });
    for socket in &judged.sockets {
        match unlinkat(dir, socket.as_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(errno) => return failed(orphan.path().join(socket), errno),
        }
    }
    match unlinkat(parent, orphan.name.as_str(), UnlinkatFlags::RemoveDir) {
        Ok(()) => SocketDirOutcome::Removed,
        Err(Errno::ENOENT) => SocketDirOutcome::Vanished,
        // Something was put in it after the check: it is not ours to empty.
        Err(Errno::ENOTEMPTY | Errno::EEXIST) => {
            SocketDirOutcome::Kept(SocketDirKeepReason::UnexpectedEntry)
        }
        Err(errno) => failed(orphan.path(), errno),
    }
}
