//! Reusing the `memmap` files of storages this process allocated, once the
//! kernel has seen every message that named one opened and let go of.
//!
//! A fresh file costs its creation, sizing and reserving on a real
//! filesystem (journalled, on most), its mapping, and its removal;
//! [`SharingContext::allocate`](crate::SharingContext::allocate) takes a
//! file of the right size from [`MemmapPool`] instead when one is free, and
//! zeroes it; the file of a storage allocated there comes back to the pool,
//! still mapped, when the storage dies here.
//!
//! # When a file is free
//!
//! No receiver says when it is done with a file, torch least of all, but
//! the kernel sees it: the pool watches its directory with inotify
//! ([`OpenWatch`]), and counts, for each file it made, the opens *for
//! writing* let go of entirely (`IN_CLOSE_WRITE`, which comes once the
//! open's last fd is closed and its last mapping unmapped). A file is
//! reused only when its storage died here and that count has reached the
//! number of messages this process sent naming it. That is enough:
//!
//! - every receiver of a message opens the file for writing once to map it
//!   (torch's `UntypedStorage.from_file(path, shared=True, nbytes)`, and
//!   ours, whether it maps the file or finds it held already), and lets go
//!   of that open when its storage dies;
//! - so with `n` messages sent, the count reaching `n` means each was
//!   opened and each of those opens is gone: no receiver maps the file and
//!   none is still to open it. This process's own open, made before the
//!   counting began, is not counted; nobody can send the file while it is
//!   in the pool.
//!
//! Counts only ever come out short (the kernel merges two identical events
//! in a row; when it drops events, every count is marked lost and those
//! files are never reused), which delays or forgoes reuse and nothing else.
//! A message that is never opened (its receiver died, or refused the path)
//! keeps its file out of reuse; the file leaves the pool at its lifetime,
//! and is kept for late receivers as before
//! ([`SharingContext::with_unfetched_lifetime`](crate::SharingContext::with_unfetched_lifetime)).
//!
//! A receiver that sends the file on gives it receivers of its own, whose
//! messages this process never counted: before sending a file it did not
//! create, a tensorshare process marks it with an extended attribute
//! ([`MemmapSegment::sent_on`]), and a file so marked, or on a filesystem
//! that keeps no such attributes, is never reused. torch sends no file on as
//! a file: it moves the storage into shared memory of its own.
//!
//! What the rule trusts: that no other process opens the file for
//! writing. Files are mode 0600, so only processes of the same user can,
//! and such a process can as well write into the file or truncate it, the
//! trust the strategy already places in them. A pickle unpickled twice
//! opens the file twice for one send, and is outside the rule, as it is
//! outside torch's counting under `file_system`.
//!
//! When inotify is not available (the user's `fs.inotify.max_user_instances`
//! are taken), or the context keeps its files, every allocation makes a new
//! file as before.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Instant;

use tensorshare_strategies::Segment;
use tensorshare_strategies::memmap::MemmapSegment;
use tensorshare_strategies::platform::open_watch::OpenWatch;
use tensorshare_strategies::platform::process::has_exited;

use super::Pool;
use super::parked::{Parked, Strandable};
use super::watched::Watcher;
use crate::sync::expiry::{Expiring, ExpiringQueue};

/// `memmap` files this process made for storages, and those of them whose
/// storage died here, by length, oldest first; let go of on time while
/// idle too.
#[derive(Debug)]
pub(crate) struct MemmapPool {
    /// The directory whose files it pools and whose opens it counts.
    dir: PathBuf,
    state: Expiring<PoolState>,
}

#[derive(Debug)]
struct PoolState {
    /// What was seen of the pool's files; `None` before the first
    /// allocation, or for good when the directory cannot be watched.
    seen: Option<Seen>,
    unavailable: bool,
    parked: Parked<MemmapSegment>,
}

/// The opens of the pool's files and of every other file sent, and the
/// messages sent naming each.
#[derive(Debug)]
struct Seen {
    watch: OpenWatch,
    sends: HashMap<OsString, Sends>,
    /// The size of `sends` at which the entries of files that are gone are
    /// next dropped: a file sent as a copy is tracked until then.
    prune_at: usize,
}

/// The messages sent naming one file.
#[derive(Debug, Default)]
struct Sends {
    messages: u64,
    /// The opens counted before its first message: none of them a
    /// receiver's.
    opens_before: Option<u64>,
}

/// How many tracked files are first pruned of those that are gone.
const FIRST_PRUNE: usize = 256;

impl Seen {
    fn new(watch: OpenWatch) -> Self {
        Self {
            watch,
            sends: HashMap::new(),
            prune_at: FIRST_PRUNE,
        }
    }

    /// Whether every message that named `segment` was opened and let go
    /// of (see the module's docs), as of the last refresh.
    fn all_received(&self, segment: &MemmapSegment) -> bool {
        let Some(name) = segment.path().file_name() else {
            return false;
        };
        let Some(sends) = self.sends.get(name) else {
            return false;
        };
        // A receiver that sent it on has receivers of its own, whose
        // messages this process did not count.
        if segment.sent_on() != Some(false) {
            return false;
        }
        self.watch
            .counts(name)
            .is_some_and(|counts| !counts.lost && counts.released_writable >= sends.messages)
    }

    /// Whether every message that named the file `name` was opened, as of
    /// the last refresh; `None` when that cannot be told (the file is not
    /// tracked, or events about it were lost).
    fn all_opened(&self, name: &OsStr) -> Option<bool> {
        let sends = self.sends.get(name)?;
        let counts = self.watch.counts(name).filter(|counts| !counts.lost)?;
        let before = sends.opens_before.unwrap_or(counts.opened);
        let by_receivers = counts.opened.saturating_sub(before);
        Some(by_receivers >= sends.messages)
    }

    /// Stops counting for files about to be let go of.
    fn untrack(&mut self, segments: &[MemmapSegment]) {
        for name in segments.iter().filter_map(|s| s.path().file_name()) {
            self.watch.untrack(name);
            self.sends.remove(name);
        }
    }

    /// Forgets the files of `dir` that are gone, once their number has
    /// doubled since the last time.
    fn prune(&mut self, dir: &Path) {
        if self.sends.len() < self.prune_at {
            return;
        }
        let gone: Vec<OsString> = self
            .sends
            .keys()
            .filter(|name| !dir.join(name).exists())
            .cloned()
            .collect();
        for name in gone {
            self.watch.untrack(&name);
            self.sends.remove(&name);
        }
        self.prune_at = (self.sends.len() * 2).max(FIRST_PRUNE);
    }
}

impl PoolState {
    /// What is seen of `dir`, watched from the first call on; `None` for
    /// good once it cannot be.
    fn watching(&mut self, dir: &Path) -> Option<&mut Seen> {
        if self.unavailable {
            return None;
        }
        if self.seen.is_none() {
            match OpenWatch::new(dir) {
                Ok(watch) => self.seen = Some(Seen::new(watch)),
                Err(_) => self.unavailable = true,
            }
        }
        self.seen.as_mut()
    }
}

impl ExpiringQueue for PoolState {
    type Expired = MemmapSegment;

    /// The parked files past their lifetime or stranded, no longer counted.
    fn take_expired(&mut self, now: Instant, expired: &mut Vec<MemmapSegment>) {
        let before = expired.len();
        self.parked.take_expired(now, expired);
        if let Some(seen) = &mut self.seen {
            seen.untrack(&expired[before..]);
        }
    }

    fn next_deadline(&mut self) -> Option<Instant> {
        self.parked.next_deadline()
    }
}

impl Strandable for MemmapSegment {
    /// Every process it was sent to has exited: one that never opened it
    /// leaves a count of opens that will not come.
    fn is_stranded_by(&self, exited: &mut dyn FnMut(u32) -> bool) -> bool {
        self.lease()
            .is_some_and(|lease| lease.recipients().all_exited_by(exited))
    }
}

impl MemmapPool {
    /// A pool of the files of `dir`, keeping at most `max_files` files
    /// (each holds a mapping) and `max_bytes` bytes.
    pub(crate) fn new(dir: &Path, max_files: usize, max_bytes: usize) -> Self {
        let state = PoolState {
            seen: None,
            unavailable: false,
            parked: Parked::new(max_files, max_bytes),
        };
        Self {
            dir: dir.to_path_buf(),
            state: Expiring::new(state, "tensorshare-memmap-pool"),
        }
    }

    /// Counts a message naming `segment`, a file of the pool's directory:
    /// a file the pool made, or any other this process sent (a storage
    /// copied into a file), whose opens are counted from now on so that
    /// [`all_opened`](Self::all_opened) can tell when its receivers have
    /// taken it.
    pub(crate) fn sent(&self, segment: &MemmapSegment) {
        let Some(name) = segment.path().file_name() else {
            return;
        };
        self.state.update(|state| {
            let Some(seen) = state.watching(&self.dir) else {
                return;
            };
            // Every open made before this message is counted now, so that
            // `opens_before` holds none of its receiver's.
            seen.watch.refresh();
            if !seen.sends.contains_key(name) {
                seen.prune(&self.dir);
                seen.watch.track(name);
            }
            let opened = seen.watch.counts(name).map_or(0, |counts| counts.opened);
            let sends = seen.sends.entry(name.to_owned()).or_default();
            sends.opens_before.get_or_insert(opened);
            sends.messages += 1;
        });
    }

    /// For each of `paths`, whether every message this process sent naming
    /// the file there has been opened by its receiver, torch's `from_file`
    /// or ours; `None` where that cannot be told: the directory cannot be
    /// watched, or the kernel dropped events. The kernel's events are read
    /// once for them all.
    pub(crate) fn all_opened<'p>(
        &self,
        paths: impl IntoIterator<Item = &'p Path>,
    ) -> Vec<Option<bool>> {
        self.state.update(|state| {
            let seen = state.seen.as_mut().map(|seen| {
                seen.watch.refresh();
                &*seen
            });
            paths
                .into_iter()
                .map(|path| seen?.all_opened(path.file_name()?))
                .collect()
        })
    }
}

impl Watcher for MemmapPool {
    type Segment = MemmapSegment;

    /// Parks the file of a storage that died here, or lets go of it when
    /// the pool holds enough, or when it is stranded ([`Strandable`]).
    fn ended(&self, segment: MemmapSegment) {
        let stranded = segment.is_stranded_by(&mut has_exited);
        let reusable = !segment.was_truncated() && !stranded;
        let now = Instant::now();
        // Unmapped, and removed unless a receiver's lease keeps it, outside
        // the lock.
        let dropped = self.state.update(|state| {
            let dropped = state.parked.take_back(segment, reusable, now);
            if let Some(seen) = &mut state.seen {
                seen.untrack(&dropped);
            }
            dropped
        });
        drop(dropped);
    }
}

impl Pool for MemmapPool {
    /// A file of exactly `nbytes` whose storage died here and whose every
    /// message was opened and let go of, with whatever bytes its last
    /// storage left in it.
    fn take(&self, nbytes: usize) -> Option<MemmapSegment> {
        self.state.update(|state| {
            let PoolState { seen, parked, .. } = state;
            let seen = seen.as_mut()?;
            if parked.has_len(nbytes) {
                seen.watch.refresh();
            }
            parked.take_free(nbytes, |file| seen.all_received(file))
        })
    }

    /// Starts counting the opens of `segment`, a new file of the pool's
    /// directory; `false` when the directory cannot be watched.
    fn adopt(&self, segment: &MemmapSegment) -> bool {
        let Some(name) = segment.path().file_name() else {
            return false;
        };
        self.state.update(|state| {
            let Some(seen) = state.watching(&self.dir) else {
                return false;
            };
            // Read now and then whatever the allocations are, so that the
            // kernel's queue does not overflow: a file costs far more than
            // this.
            seen.watch.refresh();
            seen.watch.track(name);
            seen.sends.insert(name.to_owned(), Sends::default());
            state.parked.adopt(segment.as_bytes().len());
            true
        })
    }

    /// Lets go of every file of a storage that died here.
    fn make_room(&self) -> usize {
        let drained = self.state.update(|state| {
            let drained = state.parked.drain(None);
            if let Some(seen) = &mut state.seen {
                seen.untrack(&drained);
            }
            drained
        });
        drained.len()
    }
}
