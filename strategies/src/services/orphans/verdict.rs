//! Judging one entry by the rules of the [module docs](super), in their
//! order.

use std::path::Path;
use std::time::{Duration, SystemTime};

use super::holders::HolderScan;
use super::lease::Probe;
use super::listing::Entry;
use super::orphan_name::OrphanName;
use super::report::{KeepReason, SegmentReport};
use crate::platform::owner::is_own_uid;
use crate::platform::process;

/// The verdict on one entry.
pub(super) enum Verdict {
    Orphan,
    Keep(KeepReason),
    /// It vanished while being judged.
    Gone,
}

/// The facts about one entry and the verdict.
pub(super) struct Judged {
    creator_alive: bool,
    holders: Vec<u32>,
    age: Duration,
    pub(super) keep: Verdict,
}

impl Judged {
    pub(super) fn into_report<N: OrphanName>(self, entry: &Entry<N>) -> Option<SegmentReport<N>> {
        let keep = match self.keep {
            Verdict::Orphan => None,
            Verdict::Keep(reason) => Some(reason),
            Verdict::Gone => return None,
        };
        Some(SegmentReport {
            name: entry.name.clone(),
            size: entry.size,
            owner_uid: entry.owner_uid,
            age: self.age,
            creator_alive: self.creator_alive,
            holders: self.holders,
            keep,
            file: entry.file,
        })
    }
}

/// Judges one entry by the rules of the module docs, in their order; asks
/// the kernel through `probe` only when every cheaper rule let it through.
pub(super) fn judge<N: OrphanName>(
    entry: &Entry<N>,
    dir: &Path,
    holders: &HolderScan,
    min_age: Duration,
    now: SystemTime,
    probe: impl FnOnce() -> Probe,
) -> Judged {
    let creator_alive = process::exists(entry.name.creator_pid());
    let holder_pids: Vec<u32> = holders
        .held
        .get(&entry.file)
        .map(|pids| pids.iter().copied().collect())
        .unwrap_or_default();
    let age = now.duration_since(entry.changed).unwrap_or(Duration::ZERO);
    let awaited = N::awaits_receivers_until(&dir.join(entry.name.file_name()))
        .and_then(|until| until.duration_since(now).ok());
    let keep = verdict(
        entry.owner_uid,
        creator_alive,
        !holder_pids.is_empty(),
        Freshness {
            age,
            min_age,
            awaited,
        },
        holders.incomplete(),
        probe,
    );
    Judged {
        creator_alive,
        holders: holder_pids,
        age,
        keep,
    }
}

/// How recently an entry was changed or sent, against the grace.
pub(super) struct Freshness {
    /// How long ago it was last changed.
    pub(super) age: Duration,
    pub(super) min_age: Duration,
    /// How long its sender said a receiver may still open it
    /// ([`OrphanName::awaits_receivers_until`]).
    pub(super) awaited: Option<Duration>,
}

/// The rules of the module docs, in their order.
pub(super) fn verdict(
    owner_uid: u32,
    creator_alive: bool,
    visibly_held: bool,
    freshness: Freshness,
    proc_incomplete: bool,
    probe: impl FnOnce() -> Probe,
) -> Verdict {
    let Freshness {
        age,
        min_age,
        awaited,
    } = freshness;
    if !is_own_uid(owner_uid) {
        return Verdict::Keep(KeepReason::OtherUser { uid: owner_uid });
    }
    if creator_alive {
        return Verdict::Keep(KeepReason::CreatorAlive);
    }
    if visibly_held {
        return Verdict::Keep(KeepReason::Held);
    }
    if age < min_age {
        return Verdict::Keep(KeepReason::Recent { age });
    }
    // A grace of zero is an operator's word that nothing is awaited.
    if let Some(left) = awaited.filter(|_| !min_age.is_zero()) {
        return Verdict::Keep(KeepReason::AwaitingReceivers { left });
    }
    match probe() {
        Probe::Exclusive(_) => Verdict::Orphan,
        Probe::InUse => Verdict::Keep(KeepReason::HeldUnseen),
        Probe::Replaced => Verdict::Keep(KeepReason::Replaced),
        Probe::Gone => Verdict::Gone,
        Probe::Unavailable(errno) if proc_incomplete => {
            Verdict::Keep(KeepReason::Unverifiable { errno })
        }
        Probe::Unavailable(_) => Verdict::Orphan,
    }
}
