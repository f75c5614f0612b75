//! Reusing the memfds of storages this process sent, once everyone who
//! received them has said they no longer map them.
//!
//! torch's `file_descriptor` strategy puts every new tensor in a fresh
//! memfd, and a fresh memfd costs the kernel more than the tensor's bytes:
//! creating, sealing, mapping, allocating and zeroing pages, then unmapping
//! and freeing them. A producer that streams tensors gets the same memory
//! back instead: [`SharingContext::allocate`](crate::SharingContext::allocate)
//! takes a segment from [`MemfdPool`] when one of the right size is free,
//! and the storage's segment comes back to the pool when the storage dies.
//!
//! A segment is free only when nothing outside this process can see it any
//! more. Each time it is sent, the pool records the resource-sharer key it
//! went under; a tensorshare receiver reports each key unmapped when its
//! storage dies there (the `notices` module), and
//! the sharer collects those reports. A key fetched by a Python process is never
//! reported, so its segment is never reused: it is freed as always once the
//! pool gives up on it. Whatever the receivers say, only senders' own
//! segments are ever reused, and only the memory of a storage that died
//! here.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tensorshare_strategies::Segment;
use tensorshare_strategies::file_descriptor::{FdSegment, FileIdentity};

use super::Pool;
use super::aging::AgingMap;
use super::by_length::{ByLength, kept_bytes_limit};
use super::watched::Watcher;
use crate::resource_sharer::KeyReports;
use crate::sync::expiry::{Expiring, ExpiringQueue};

/// How long a segment waits for its receivers' reports after its storage
/// died here before the pool frees it.
const UNREPORTED_LIFETIME: Duration = Duration::from_secs(30);

/// How long a free segment waits to be reused before the pool frees it.
const IDLE_LIFETIME: Duration = Duration::from_secs(10);

/// Memfds this process made for storages, and those of them free for reuse,
/// freed on time while idle too.
#[derive(Debug)]
pub(crate) struct MemfdPool {
    state: Expiring<PoolState>,
    /// The most free segments kept, and the most parked: each holds an fd.
    max_idle_segments: usize,
    /// The most free bytes kept, whatever the producer held at once.
    max_idle_bytes: usize,
}

#[derive(Debug, Default)]
struct PoolState {
    /// Free segments by length, oldest first, with when each became free.
    idle: ByLength<FdSegment>,
    /// Segments whose storage died here while some receiver may still map
    /// them, oldest first.
    parked: AgingMap<FileIdentity, FdSegment>,
    /// Every segment the pool made that is held by a storage, parked or
    /// free.
    tracked: HashMap<FileIdentity, Tracked>,
    /// The segment each key not yet reported was sent for.
    keys: HashMap<i64, FileIdentity>,
    /// Bytes of tracked segments, and the most there ever were at once:
    /// the pool keeps up to that much free.
    tracked_bytes: usize,
    peak_tracked_bytes: usize,
}

#[derive(Debug)]
struct Tracked {
    nbytes: usize,
    /// Keys it was sent under that no receiver has reported yet.
    outstanding: Vec<i64>,
    /// Whether a receiver fetched it through the resource sharer: one that
    /// never reports (a Python process), so it is never reused.
    fetched: bool,
}

impl MemfdPool {
    /// A pool keeping at most `max_idle_segments` free segments (each
    /// holds an fd) and at most `max_idle_bytes` free bytes.
    pub(crate) fn new(max_idle_segments: usize, max_idle_bytes: usize) -> Self {
        Self {
            state: Expiring::new(PoolState::default(), "tensorshare-memfd-pool"),
            max_idle_segments,
            max_idle_bytes,
        }
    }

    /// Records that the segment `identity` went out under `key`; segments
    /// the pool did not make are not its business.
    pub(crate) fn sent(&self, identity: FileIdentity, key: i64) {
        self.state.update(|state| {
            if let Some(tracked) = state.tracked.get_mut(&identity) {
                tracked.outstanding.push(key);
                state.keys.insert(key, identity);
            }
        });
    }

    /// Takes what the sharer saw of keys: a segment fetched under one is
    /// never reused, and freed at once if its storage died here; a segment
    /// whose last key was reported unmapped, and whose storage died here,
    /// becomes free.
    pub(crate) fn take_reports(&self, reports: KeyReports) {
        if reports.fetched.is_empty() && reports.unmapped.is_empty() {
            return;
        }
        let now = Instant::now();
        // Closed outside the lock.
        let freed = self.state.update(|state| {
            let mut freed = Vec::new();
            for key in reports.fetched {
                let Some(identity) = state.keys.remove(&key) else {
                    continue;
                };
                if let Some(tracked) = state.tracked.get_mut(&identity) {
                    tracked.fetched = true;
                    if let Some(segment) = state.parked.remove(&identity) {
                        state.untrack(identity);
                        freed.push(segment);
                    }
                }
            }
            for key in reports.unmapped {
                let Some(identity) = state.keys.remove(&key) else {
                    continue;
                };
                let Some(tracked) = state.tracked.get_mut(&identity) else {
                    continue;
                };
                tracked.outstanding.retain(|&k| k != key);
                if tracked.outstanding.is_empty()
                    && !tracked.fetched
                    && let Some(segment) = state.parked.remove(&identity)
                {
                    freed.extend(self.make_idle(state, segment, now));
                }
            }
            freed
        });
        drop(freed);
    }

    /// Puts `segment` on the free list; returns it, untracked, to be freed
    /// when the pool holds enough.
    fn make_idle(
        &self,
        state: &mut PoolState,
        segment: FdSegment,
        now: Instant,
    ) -> Option<FdSegment> {
        let byte_limit = kept_bytes_limit(self.max_idle_bytes, state.peak_tracked_bytes);
        if state.idle.segments() >= self.max_idle_segments
            || state.idle.bytes().saturating_add(segment.len()) > byte_limit
        {
            state.untrack(segment.identity());
            return Some(segment);
        }
        state.idle.push(segment, now);
        None
    }

    /// How many segments are free for reuse.
    #[cfg(test)]
    fn idle_segments(&self) -> usize {
        self.state.read(|state| state.idle.segments())
    }
}

impl Pool for MemfdPool {
    /// A free segment of exactly `nbytes`, oldest first.
    fn take(&self, nbytes: usize) -> Option<FdSegment> {
        self.state.update(|state| state.idle.pop(nbytes))
    }

    fn adopt(&self, segment: &FdSegment) -> bool {
        let nbytes = segment.as_bytes().len();
        let tracked = Tracked {
            nbytes,
            outstanding: Vec::new(),
            fetched: false,
        };
        self.state.update(|state| {
            state.tracked.insert(segment.identity(), tracked);
            state.tracked_bytes += nbytes;
            state.peak_tracked_bytes = state.peak_tracked_bytes.max(state.tracked_bytes);
        });
        true
    }

    /// Frees every free segment, so that their fds and memory go back to
    /// the system.
    fn make_room(&self) -> usize {
        // Closed outside the lock.
        let freed = self.state.update(|state| {
            let freed = state.idle.drain(None);
            for segment in &freed {
                state.untrack(segment.identity());
            }
            freed
        });
        freed.len()
    }
}

impl Watcher for MemfdPool {
    type Segment = FdSegment;

    /// Takes back the segment of a storage that died here: free at once if
    /// every receiver has reported it, else parked until they do.
    fn ended(&self, segment: FdSegment) {
        let identity = segment.identity();
        let now = Instant::now();
        // Closed outside the lock.
        let freed = self.state.update(|state| {
            let Some(tracked) = state.tracked.get(&identity) else {
                return vec![segment];
            };
            if tracked.fetched {
                state.untrack(identity);
                return vec![segment];
            }
            if tracked.outstanding.is_empty() {
                return self.make_idle(state, segment, now).into_iter().collect();
            }
            state.parked.insert(identity, segment, now);
            // Each waits with its fd open: the oldest go first.
            let mut freed = Vec::new();
            while state.parked.len() > self.max_idle_segments {
                let Some((oldest, segment)) = state.parked.pop_oldest() else {
                    break;
                };
                state.untrack(oldest);
                freed.push(segment);
            }
            freed
        });
        drop(freed);
    }
}

impl ExpiringQueue for PoolState {
    type Expired = FdSegment;

    /// Segments free for too long, and parked segments whose receivers
    /// never reported.
    fn take_expired(&mut self, now: Instant, expired: &mut Vec<FdSegment>) {
        let cutoff = now.checked_sub(IDLE_LIFETIME);
        if cutoff.is_some() {
            for segment in self.idle.drain(cutoff) {
                self.untrack(segment.identity());
                expired.push(segment);
            }
        }
        while let Some((identity, segment)) = self
            .parked
            .pop_oldest_if(|since, _| now.duration_since(since) > UNREPORTED_LIFETIME)
        {
            self.untrack(identity);
            expired.push(segment);
        }
    }

    fn next_deadline(&mut self) -> Option<Instant> {
        let idle = self.idle.oldest().map(|since| since + IDLE_LIFETIME);
        let parked = self
            .parked
            .oldest()
            .map(|since| since + UNREPORTED_LIFETIME);
        idle.into_iter().chain(parked).min()
    }
}

impl PoolState {
    /// Forgets the segment `identity` and the keys it waited for; a parked
    /// segment is freed with it.
    fn untrack(&mut self, identity: FileIdentity) {
        self.parked.remove(&identity);
        if let Some(tracked) = self.tracked.remove(&identity) {
            for key in tracked.outstanding {
                self.keys.remove(&key);
            }
            self.tracked_bytes -= tracked.nbytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::by_length::MIN_KEPT_BYTES;
    use super::super::watched::Watched;
    use super::*;
    use tensorshare_strategies::SharingStrategy;
    use tensorshare_strategies::file_descriptor::FileDescriptorStrategy;

    fn unmapped(keys: &[i64]) -> KeyReports {
        KeyReports {
            unmapped: keys.to_vec(),
            ..KeyReports::default()
        }
    }

    fn pool() -> Arc<MemfdPool> {
        Arc::new(MemfdPool::new(16, 1 << 30))
    }

    /// A storage's segment from `pool`, as `SharingContext::allocate` makes
    /// it, and its identity.
    fn storage_segment(pool: &Arc<MemfdPool>, nbytes: usize) -> (Watched<MemfdPool>, FileIdentity) {
        let segment = pool.take(nbytes).unwrap_or_else(|| {
            let segment = FileDescriptorStrategy.allocate(nbytes).expect("memfd");
            pool.adopt(&segment);
            segment
        });
        let identity = segment.identity();
        (Watched::new(segment, pool), identity)
    }

    #[test]
    fn a_segment_never_sent_is_reused_once_its_storage_dies() {
        let pool = pool();
        let (first, identity) = storage_segment(&pool, 4096);
        assert!(first.as_any().downcast_ref::<FdSegment>().is_some());
        drop(first);
        assert_eq!(pool.idle_segments(), 1);
        let (_, again) = storage_segment(&pool, 4096);
        assert_eq!(again, identity);
        let (_, other_size) = storage_segment(&pool, 8192);
        assert_ne!(other_size, identity);
    }

    #[test]
    fn a_sent_segment_waits_for_every_key_it_went_under() {
        let pool = pool();
        let (segment, identity) = storage_segment(&pool, 4096);
        pool.sent(identity, 1);
        pool.sent(identity, 2);
        drop(segment);
        assert_eq!(pool.idle_segments(), 0, "parked while keys are out");
        pool.take_reports(unmapped(&[1, 99]));
        assert_eq!(pool.idle_segments(), 0, "key 2 is still out");
        pool.take_reports(unmapped(&[2]));
        assert_eq!(pool.idle_segments(), 1);
        assert_eq!(pool.take(4096).map(|s| s.identity()), Some(identity));
    }

    #[test]
    fn reports_before_the_storage_dies_count_once_it_does() {
        let pool = pool();
        let (segment, identity) = storage_segment(&pool, 4096);
        pool.sent(identity, 7);
        pool.take_reports(unmapped(&[7, 7]));
        assert_eq!(pool.idle_segments(), 0, "its storage is alive here");
        drop(segment);
        assert_eq!(pool.idle_segments(), 1);
    }

    #[test]
    fn keys_of_segments_it_did_not_make_are_ignored() {
        let pool = pool();
        let foreign = FileDescriptorStrategy.allocate(4096).expect("memfd");
        pool.sent(foreign.identity(), 3);
        pool.take_reports(unmapped(&[3]));
        pool.ended(foreign);
        assert_eq!(pool.idle_segments(), 0);
    }

    #[test]
    fn a_segment_fetched_through_the_sharer_is_freed_and_never_reused() {
        let pool = pool();
        let (segment, identity) = storage_segment(&pool, 4096);
        pool.sent(identity, 1);
        pool.sent(identity, 2);
        drop(segment);
        pool.take_reports(KeyReports {
            fetched: vec![1],
            unmapped: vec![2],
        });
        assert_eq!(pool.idle_segments(), 0);
        assert!(
            pool.state.read(|state| state.tracked.is_empty()),
            "freed at once"
        );
    }

    #[test]
    fn parked_segments_stay_within_the_fd_budget() {
        let pool = Arc::new(MemfdPool::new(2, 1 << 30));
        for key in 0..5 {
            let (segment, identity) = storage_segment(&pool, 4096);
            pool.sent(identity, key);
            drop(segment);
        }
        let counts = pool
            .state
            .read(|state| (state.parked.len(), state.tracked.len()));
        assert_eq!(counts, (2, 2));
    }

    #[test]
    fn segments_free_or_parked_too_long_are_freed() {
        let pool = pool();
        let (idle, _) = storage_segment(&pool, 4096);
        let (parked, identity) = storage_segment(&pool, 4096);
        pool.sent(identity, 1);
        drop((idle, parked));
        let expire_at = |later: Duration| {
            pool.state.update(|state| {
                let mut expired = Vec::new();
                state.take_expired(Instant::now() + later, &mut expired);
                (state.idle.segments(), state.parked.len())
            })
        };
        assert_eq!(expire_at(Duration::ZERO), (1, 1));
        let past = Duration::from_secs(1);
        assert_eq!(expire_at(IDLE_LIFETIME + past), (0, 1));
        assert_eq!(expire_at(UNREPORTED_LIFETIME + past), (0, 0));
        let forgotten = pool
            .state
            .read(|state| state.tracked.is_empty() && state.keys.is_empty());
        assert!(forgotten, "the freed segments are still tracked");
    }

    /// Nothing allocated, sent or reported: the pool's own thread frees
    /// the free segment once its lifetime has passed.
    #[test]
    fn an_idle_pool_frees_its_segments_on_time() {
        let pool = pool();
        drop(storage_segment(&pool, 4096).0);
        assert_eq!(pool.idle_segments(), 1);
        let freed = Instant::now();
        let deadline = freed + IDLE_LIFETIME + Duration::from_secs(5);
        while pool.state.read(|state| !state.tracked.is_empty()) {
            assert!(Instant::now() < deadline, "the idle pool kept its memfd");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            freed.elapsed() >= IDLE_LIFETIME,
            "freed before its lifetime"
        );
    }

    #[test]
    fn keeps_at_most_its_limits() {
        let pool = Arc::new(MemfdPool::new(2, 1 << 30));
        let segments: Vec<_> = (0..3).map(|_| storage_segment(&pool, 4096).0).collect();
        drop(segments);
        assert_eq!(pool.make_room(), 2);
        assert_eq!(pool.idle_segments(), 0);

        // Free bytes stay within the most the producer held at once, or
        // the floor for small producers.
        let pool = Arc::new(MemfdPool::new(64, 1 << 30));
        let big = MIN_KEPT_BYTES / 2 + 4096;
        let segments: Vec<_> = (0..2).map(|_| storage_segment(&pool, big).0).collect();
        drop(segments);
        assert_eq!(pool.idle_segments(), 2, "both were held at once");
        let (one, _) = storage_segment(&pool, big);
        drop(one);
        assert_eq!(pool.idle_segments(), 2);
    }
}
