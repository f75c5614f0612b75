//! The names a connection registered, as its manager knows them: what a
//! replacement manager must be told when that one dies.
//!
//! A manager unlinks every name registered with it when it exits, after
//! its last client, freed or not, as long as the object exists: that is
//! what reclaims a segment whose count a lost message left above zero. So
//! a replacement is told of the names this process still holds and of
//! those it freed whose objects still exist, and of the processes messages
//! naming them went to (in-flight notices), so that it lets go of a name
//! whose receivers exited as the dead manager would have.

use std::collections::{HashMap, HashSet};

use nix::sys::stat::lstat;

use crate::platform::owner::is_own_uid;
use crate::platform::process::Recipients;
use crate::platform::segment_name::SegmentName;

/// How many freed names are kept before those whose objects are gone are
/// first dropped.
const FIRST_PRUNE: usize = 64;

#[derive(Debug)]
pub(super) struct RegisteredNames {
    /// Names registered and not yet freed, with how many times.
    held: HashMap<SegmentName, u32>,
    /// Names freed whose objects may still exist.
    freed: HashSet<SegmentName>,
    /// The processes messages naming a held or freed name went to.
    recipients: HashMap<SegmentName, Recipients>,
    /// The size of `freed` at which those whose objects are gone are next
    /// dropped.
    prune_at: usize,
}

impl Default for RegisteredNames {
    fn default() -> Self {
        Self {
            held: HashMap::new(),
            freed: HashSet::new(),
            recipients: HashMap::new(),
            prune_at: FIRST_PRUNE,
        }
    }
}

impl RegisteredNames {
    /// Notes a registration of `name`.
    pub(super) fn registered(&mut self, name: &SegmentName) {
        *self.held.entry(name.clone()).or_insert(0) += 1;
        self.freed.remove(name);
    }

    /// Notes that a message naming `name` went to process `receiver`.
    pub(super) fn sent_to(&mut self, name: &SegmentName, receiver: u32) {
        if self.held.contains_key(name) || self.freed.contains(name) {
            self.recipients
                .entry(name.clone())
                .or_default()
                .add(Some(receiver));
        }
    }

    /// Notes a free of `name`.
    pub(super) fn freed(&mut self, name: &SegmentName) {
        let Some(count) = self.held.get_mut(name) else {
            return;
        };
        *count -= 1;
        if *count > 0 {
            return;
        }
        self.held.remove(name);
        self.freed.insert(name.clone());
        // Most freed segments are unlinked by their last holder moments
        // later: dropping the gone ones when the set has doubled keeps it
        // near the live ones, at O(1) per free.
        if self.freed.len() >= self.prune_at {
            self.forget_gone();
            self.prune_at = (self.freed.len() * 2).max(FIRST_PRUNE);
        }
    }

    /// Forgets the freed names whose objects are gone, and their
    /// recipients.
    fn forget_gone(&mut self) {
        self.freed.retain(exists_as_ours);
        let (held, freed) = (&self.held, &self.freed);
        self.recipients
            .retain(|name, _| held.contains_key(name) || freed.contains(name));
    }

    /// What a replacement manager must be told of: every held name (one
    /// being created may not exist yet), and the freed ones whose objects
    /// still exist and are this user's, each with the processes its
    /// messages went to. Freed names that are gone are forgotten.
    pub(super) fn replay(&mut self) -> Vec<(SegmentName, Vec<u32>)> {
        self.forget_gone();
        self.held
            .keys()
            .chain(&self.freed)
            .map(|name| {
                let pids = self
                    .recipients
                    .get(name)
                    .map_or_else(Vec::new, |recipients| recipients.pids().to_vec());
                (name.clone(), pids)
            })
            .collect()
    }
}

/// Whether the object `name` names exists and belongs to this process's
/// effective user.
fn exists_as_ours(name: &SegmentName) -> bool {
    lstat(&name.shm_path()).is_ok_and(|stat| is_own_uid(stat.st_uid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_names_replay_and_freed_ones_only_while_they_exist() {
        let mut names = RegisteredNames::default();
        let held = SegmentName::fresh();
        let twice = SegmentName::fresh();
        let gone = SegmentName::fresh();
        let lingering = SegmentName::fresh();
        let path = lingering.shm_path();
        std::fs::write(&path, b"").expect("a stand-in segment");
        for name in [&held, &twice, &twice, &gone, &lingering] {
            names.registered(name);
        }
        names.sent_to(&lingering, 4242);
        names.sent_to(&gone, 4343);
        names.freed(&twice);
        names.freed(&gone);
        names.freed(&lingering);
        let mut replay = names.replay();
        replay.sort();
        let mut expected = vec![
            (held, Vec::new()),
            (twice, Vec::new()),
            (lingering, vec![4242]),
        ];
        expected.sort();
        assert_eq!(replay, expected);
        assert_eq!(
            names.recipients.len(),
            1,
            "the gone name's receivers forgotten"
        );
        std::fs::remove_file(&path).expect("remove the stand-in");
    }
}
