//! Removing orphans, after one more look at each.

use std::time::SystemTime;

use nix::errno::Errno;
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::error::{RemoveError, ScanError};
use super::holders::{HolderScan, scan_holders};
use super::lease::{Probe, hold_exclusively};
use super::listing::{FileKey, Lookup, stat_entry};
use super::orphan_name::OrphanName;
use super::orphan_scan::OrphanScan;
use super::report::{KeepReason, SegmentReport};
use super::verdict::{Verdict, judge};
use crate::platform::segment_name::SegmentName;

impl<N: OrphanName> OrphanScan<N> {
    /// Removes every orphan of this scan, checking each again just before:
    /// one more pass over `/proc`, then a fresh `lstat`, `kill(pid, 0)` and
    /// write lease, held while unlinking. A segment that is no longer an
    /// orphan is kept and reported with the reason.
    ///
    /// # Errors
    ///
    /// [`ScanError::ListProc`] when `/proc` cannot be listed for the second
    /// look; nothing is removed then. A segment that cannot be removed is
    /// reported in its [`Removal`] and the others are still removed.
    ///
    /// # Examples
    ///
    /// See the [module docs](super).
    pub fn remove_orphans(&self) -> Result<Vec<Removal<N>>, ScanError> {
        let candidates: Vec<&SegmentReport<N>> = self.orphans().collect();
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let targets: Vec<(&str, FileKey)> = candidates
            .iter()
            .map(|s| (s.name.file_name(), s.file))
            .collect();
        let holders = scan_holders(&targets)?;
        let mut removals = Vec::with_capacity(candidates.len());
        for segment in candidates {
            let outcome = self.recheck_and_remove(segment, &holders);
            removals.push(Removal {
                name: segment.name.clone(),
                size: segment.size,
                creator_pid: segment.creator_pid(),
                outcome,
            });
        }
        Ok(removals)
    }

    fn recheck_and_remove(
        &self,
        segment: &SegmentReport<N>,
        holders: &HolderScan,
    ) -> RemovalOutcome<N> {
        let entry = match stat_entry(&self.dir, &segment.name) {
            Ok(Lookup::Found(entry)) => entry,
            Ok(Lookup::Gone) => return RemovalOutcome::Vanished,
            Ok(Lookup::NotRegular(_)) => return RemovalOutcome::Kept(KeepReason::Replaced),
            Err(errno) => {
                return RemovalOutcome::Failed(RemoveError::Recheck {
                    name: segment.name.clone(),
                    errno,
                });
            }
        };
        if entry.file != segment.file {
            return RemovalOutcome::Kept(KeepReason::Replaced);
        }
        let mut hold = None;
        let judged = judge(
            &entry,
            self.options.dir_path(),
            holders,
            self.options.min_age_value(),
            SystemTime::now(),
            || match hold_exclusively(&self.dir, &entry) {
                Probe::Exclusive(exclusive) => {
                    hold = exclusive;
                    Probe::Exclusive(None)
                }
                other => other,
            },
        );
        match judged.keep {
            Verdict::Keep(reason) => return RemovalOutcome::Kept(reason),
            Verdict::Gone => return RemovalOutcome::Vanished,
            Verdict::Orphan => {}
        }
        // Another process opening the file while the lease is held breaks it.
        if hold.as_ref().is_some_and(|hold| !hold.unbroken()) {
            return RemovalOutcome::Kept(KeepReason::HeldUnseen);
        }
        let unlinked = unlinkat(
            &self.dir,
            segment.name.file_name(),
            UnlinkatFlags::NoRemoveDir,
        );
        drop(hold);
        match unlinked {
            Ok(()) => RemovalOutcome::Removed,
            Err(Errno::ENOENT) => RemovalOutcome::Vanished,
            Err(errno @ (Errno::EPERM | Errno::EACCES)) => {
                RemovalOutcome::Failed(RemoveError::PermissionDenied {
                    name: segment.name.clone(),
                    owner_uid: entry.owner_uid,
                    errno,
                })
            }
            Err(errno) => RemovalOutcome::Failed(RemoveError::Unlink {
                name: segment.name.clone(),
                errno,
            }),
        }
    }
}

/// What [`OrphanScan::remove_orphans`] did with one orphan.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Removal<N = SegmentName> {
    /// The segment (or memmap file).
    pub name: N,
    /// Its size at the scan, in bytes.
    pub size: u64,
    /// The pid of the process that created it, from its name.
    pub creator_pid: u32,
    /// What happened.
    pub outcome: RemovalOutcome<N>,
}

/// What happened to one orphan at removal.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemovalOutcome<N = SegmentName> {
    /// It was unlinked.
    Removed,
    /// The second look found it is not an orphan after all; it was left.
    Kept(KeepReason),
    /// It was gone already (the manager or another `gc` removed it).
    Vanished,
    /// Unlinking failed; it is still there.
    Failed(RemoveError<N>),
}
