//! Reusing the memfds of storages this process sent, once everyone who
//! received them has said they no longer map them.
//!
//! torch's `file_descriptor` strategy puts every new tensor in a fresh
//! memfd, and a fresh memfd costs the kernel more than the tensor's bytes:
//! creating, sealing, mapping, allocating and zeroing pages, then unmapping
//! and freeing them. A producer that streams tensors gets the same memory
//! back instead: [`SharingContext::allocate`](super::SharingContext::allocate)
//! takes a segment from [`SegmentPool`] when one of the right size is free,
//! and the storage's segment comes back to the pool when the storage dies.
//!
//! A segment is free only when nothing outside this process can see it any
//! more. Each time it is sent, the pool records the resource-sharer key it
//! went under; a tensorshare receiver reports each key unmapped when its
//! storage dies there ([`NoticeBoard`](super::notices::NoticeBoard)), and
//! the sharer collects those reports. A key fetched by a Python process is never
//! reported, so its segment is never reused: it is freed as always once the
//! pool gives up on it. Whatever the receivers say, only senders' own
//! segments are ever reused, and only the memory of a storage that died
//! here.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tensorshare_strategies::Segment;
use tensorshare_strategies::file_descriptor::{FdSegment, FileIdentity};

use super::lock;
use super::watched::Watcher;
use crate::resource_sharer::KeyReports;

/// How long a segment waits for its receivers' reports after its storage
/// died here before the pool frees it.
const PARKED_LIFETIME: Duration = Duration::from_secs(30);

/// How long a free segment waits to be reused before the pool frees it.
const IDLE_LIFETIME: Duration = Duration::from_secs(10);

/// The most bytes the pool keeps free when the producer never held more at
/// once than [`MIN_IDLE_BYTES`].
const MIN_IDLE_BYTES: usize = 64 << 20;

/// Memfds this process made for storages, and those of them free for reuse.
#[derive(Debug)]
pub(crate) struct SegmentPool {
    state: Mutex<PoolState>,
    /// The most free segments kept: each holds an fd.
    max_idle_segments: usize,
    /// The most free bytes kept, whatever the producer held at once.
    max_idle_bytes: usize,
}

#[derive(Debug, Default)]
struct PoolState {
    /// Free segments by length, oldest first, with when each became free.
    idle: HashMap<usize, VecDeque<(Instant, FdSegment)>>,
    idle_bytes: usize,
    idle_segments: usize,
    /// Every segment the pool made that is held by a storage, or waits for
    /// its receivers.
    tracked: HashMap<FileIdentity, Tracked>,
    /// The segment each key not yet reported was sent for.
    keys: HashMap<i64, FileIdentity>,
    /// Parked segments, oldest first, with when each was parked: a stale
    /// entry (the segment became free or parked again) is skipped.
    parked: VecDeque<(Instant, FileIdentity)>,
    /// How many segments are parked.
    parked_segments: usize,
    /// Bytes of tracked segments, and the most there ever were at once:
    /// the pool keeps up to that much free.
    tracked_bytes: usize,
    peak_tracked_bytes: usize,
}

#[derive(Debug, Default)]
struct Tracked {
    /// Keys it was sent under that no receiver has reported yet.
    outstanding: Vec<i64>,
    /// Whether a receiver fetched it through the resource sharer: one that
    /// never reports (a Python process), so it is never reused.
    fetched: bool,
    /// The segment, once its storage died here, while some receiver may
    /// still map it.
    parked: Option<(Instant, FdSegment)>,
}

impl SegmentPool {
    /// A pool keeping at most `max_idle_segments` free segments (each
    /// holds an fd) and at most `max_idle_bytes` free bytes.
    pub(crate) fn new(max_idle_segments: usize, max_idle_bytes: usize) -> Self {
        Self {
            state: Mutex::new(PoolState::default()),
            max_idle_segments,
            max_idle_bytes,
        }
    }

    /// A free segment of exactly `nbytes`, oldest first; its bytes are
    /// whatever its last storage held.
    pub(crate) fn take(&self, nbytes: usize) -> Option<FdSegment> {
        let mut state = lock(&self.state);
        state.expire(Instant::now());
        let (_, segment) = state.idle.get_mut(&nbytes)?.pop_front()?;
        state.idle_bytes -= nbytes;
        state.idle_segments -= 1;
        Some(segment)
    }

    /// Starts tracking a new segment of `nbytes` made for a storage.
    pub(crate) fn adopt(&self, identity: FileIdentity, nbytes: usize) {
        let mut state = lock(&self.state);
        state.tracked.insert(identity, Tracked::default());
        state.tracked_bytes += nbytes;
        state.peak_tracked_bytes = state.peak_tracked_bytes.max(state.tracked_bytes);
    }

    /// Records that the segment `identity` went out under `key`; segments
    /// the pool did not make are not its business.
    pub(crate) fn sent(&self, identity: FileIdentity, key: i64) {
        let mut state = lock(&self.state);
        if let Some(tracked) = state.tracked.get_mut(&identity) {
            tracked.outstanding.push(key);
            state.keys.insert(key, identity);
        }
    }

    /// Takes what the sharer saw of keys: a segment fetched under one is
    /// never reused, and freed at once if its storage died here; a segment
    /// whose last key was reported unmapped, and whose storage died here,
    /// becomes free.
    pub(crate) fn take_reports(&self, reports: KeyReports) {
        if reports.fetched.is_empty() && reports.unmapped.is_empty() {
            return;
        }
        let mut state = lock(&self.state);
        for key in reports.fetched {
            let Some(identity) = state.keys.remove(&key) else {
                continue;
            };
            let Some(tracked) = state.tracked.get_mut(&identity) else {
                continue;
            };
            tracked.fetched = true;
            if let Some((_, segment)) = &tracked.parked {
                let nbytes = segment.len();
                state.untrack(identity, nbytes);
            }
        }
        let now = Instant::now();
        for key in reports.unmapped {
            let Some(identity) = state.keys.remove(&key) else {
                continue;
            };
            let Some(tracked) = state.tracked.get_mut(&identity) else {
                continue;
            };
            tracked.outstanding.retain(|&k| k != key);
            if tracked.outstanding.is_empty() && !tracked.fetched {
                if let Some((_, segment)) = tracked.parked.take() {
                    state.parked_segments -= 1;
                    self.make_idle(&mut state, identity, segment, now);
                }
            }
        }
    }
}

impl Watcher for SegmentPool {
    /// Takes back the segment of a storage that died here: free at once if
    /// every receiver has reported it, else parked until they do.
    fn ended(&self, segment: FdSegment) {
        let identity = segment.identity();
        let mut state = lock(&self.state);
        let now = Instant::now();
        state.expire(now);
        match state.tracked.get_mut(&identity) {
            Some(tracked) if tracked.fetched => state.untrack(identity, segment.len()),
            Some(tracked) if tracked.outstanding.is_empty() => {
                self.make_idle(&mut state, identity, segment, now);
            }
            Some(tracked) => {
                tracked.parked = Some((now, segment));
                state.parked.push_back((now, identity));
                state.parked_segments += 1;
                // Each waits with its fd open: the oldest go first.
                while state.parked_segments > self.max_idle_segments && state.free_oldest_parked() {
                }
            }
            None => {}
        }
    }
}

impl SegmentPool {
    /// Puts `segment` on the free list, or frees it when the pool holds
    /// enough.
    fn make_idle(
        &self,
        state: &mut PoolState,
        identity: FileIdentity,
        segment: FdSegment,
        now: Instant,
    ) {
        let nbytes = segment.len();
        let byte_limit = self
            .max_idle_bytes
            .min(state.peak_tracked_bytes.max(MIN_IDLE_BYTES));
        if state.idle_segments >= self.max_idle_segments
            || state.idle_bytes.saturating_add(nbytes) > byte_limit
        {
            state.untrack(identity, nbytes);
            return;
        }
        state.idle_bytes += nbytes;
        state.idle_segments += 1;
        state
            .idle
            .entry(nbytes)
            .or_default()
            .push_back((now, segment));
    }

    /// Frees every free segment, so that their fds and memory go back to
    /// the system (when allocating ran out of either); how many there were.
    pub(crate) fn clear_idle(&self) -> usize {
        let mut state = lock(&self.state);
        let idle = std::mem::take(&mut state.idle);
        for (_, segment) in idle.into_values().flatten() {
            state.untrack(segment.identity(), segment.len());
        }
        state.idle_bytes = 0;
        std::mem::take(&mut state.idle_segments)
    }

    /// How many segments are free for reuse.
    #[cfg(test)]
    fn idle_segments(&self) -> usize {
        lock(&self.state).idle_segments
    }
}

impl PoolState {
    /// Frees segments free for too long, and parked segments whose
    /// receivers never reported.
    fn expire(&mut self, now: Instant) {
        let mut expired = Vec::new();
        for queue in self.idle.values_mut() {
            while queue
                .front()
                .is_some_and(|(since, _)| now.duration_since(*since) > IDLE_LIFETIME)
            {
                if let Some((_, segment)) = queue.pop_front() {
                    expired.push(segment);
                }
            }
        }
        for segment in &expired {
            self.idle_bytes -= segment.len();
            self.idle_segments -= 1;
        }
        while let Some(&(since, identity)) = self.parked.front() {
            let parked = self.parked_len(identity, since);
            if parked.is_some() && now.duration_since(since) <= PARKED_LIFETIME {
                break;
            }
            self.parked.pop_front();
            if let Some(nbytes) = parked {
                self.untrack(identity, nbytes);
            }
        }
        // Entries behind one that waits long go stale as their segments
        // become free: drop them before they outnumber the segments.
        if self.parked.len() > 2 * self.tracked.len() + 64 {
            let parked = std::mem::take(&mut self.parked);
            self.parked = parked
                .into_iter()
                .filter(|&(since, identity)| self.parked_len(identity, since).is_some())
                .collect();
        }
        for segment in expired {
            self.untrack(segment.identity(), segment.len());
        }
    }

    /// Frees the segment parked longest, dropping stale entries on the
    /// way; whether there was one.
    fn free_oldest_parked(&mut self) -> bool {
        while let Some((since, identity)) = self.parked.pop_front() {
            if let Some(nbytes) = self.parked_len(identity, since) {
                self.untrack(identity, nbytes);
                return true;
            }
        }
        false
    }

    /// The length of the segment `identity` if it is still the one parked
    /// at `since`.
    fn parked_len(&self, identity: FileIdentity, since: Instant) -> Option<usize> {
        self.tracked
            .get(&identity)?
            .parked
            .as_ref()
            .filter(|(parked_at, _)| *parked_at == since)
            .map(|(_, segment)| segment.len())
    }

    /// Forgets the segment `identity` and the keys it waited for; a parked
    /// segment is freed with it.
    fn untrack(&mut self, identity: FileIdentity, nbytes: usize) {
        if let Some(tracked) = self.tracked.remove(&identity) {
            if tracked.parked.is_some() {
                self.parked_segments -= 1;
            }
            for key in tracked.outstanding {
                self.keys.remove(&key);
            }
            self.tracked_bytes = self.tracked_bytes.saturating_sub(nbytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

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

    fn pool() -> Arc<SegmentPool> {
        Arc::new(SegmentPool::new(16, 1 << 30))
    }

    /// A storage's segment from `pool`, as `SharingContext::allocate` makes
    /// it, and its identity.
    fn storage_segment(
        pool: &Arc<SegmentPool>,
        nbytes: usize,
    ) -> (Watched<SegmentPool>, FileIdentity) {
        let segment = pool.take(nbytes).unwrap_or_else(|| {
            let segment = FileDescriptorStrategy.allocate(nbytes).expect("memfd");
            pool.adopt(segment.identity(), nbytes);
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
        assert!(lock(&pool.state).tracked.is_empty(), "freed at once");
    }

    #[test]
    fn parked_segments_stay_within_the_fd_budget() {
        let pool = Arc::new(SegmentPool::new(2, 1 << 30));
        for key in 0..5 {
            let (segment, identity) = storage_segment(&pool, 4096);
            pool.sent(identity, key);
            drop(segment);
        }
        let state = lock(&pool.state);
        assert_eq!((state.parked_segments, state.tracked.len()), (2, 2));
    }

    #[test]
    fn segments_free_or_parked_too_long_are_freed() {
        let pool = pool();
        let (idle, _) = storage_segment(&pool, 4096);
        let (parked, identity) = storage_segment(&pool, 4096);
        pool.sent(identity, 1);
        drop((idle, parked));
        let mut state = lock(&pool.state);
        assert_eq!((state.idle_segments, state.parked_segments), (1, 1));
        state.expire(Instant::now() + IDLE_LIFETIME + Duration::from_secs(1));
        assert_eq!((state.idle_segments, state.parked_segments), (0, 1));
        state.expire(Instant::now() + PARKED_LIFETIME + Duration::from_secs(1));
        assert_eq!(state.parked_segments, 0);
        assert!(state.tracked.is_empty() && state.keys.is_empty());
    }

    #[test]
    fn keeps_at_most_its_limits() {
        let pool = Arc::new(SegmentPool::new(2, 1 << 30));
        let segments: Vec<_> = (0..3).map(|_| storage_segment(&pool, 4096).0).collect();
        drop(segments);
        assert_eq!(pool.clear_idle(), 2);
        assert_eq!(pool.idle_segments(), 0);

        // Free bytes stay within the most the producer held at once, or
        // the floor for small producers.
        let pool = Arc::new(SegmentPool::new(64, 1 << 30));
        let big = MIN_IDLE_BYTES / 2 + 4096;
        let segments: Vec<_> = (0..2).map(|_| storage_segment(&pool, big).0).collect();
        drop(segments);
        assert_eq!(pool.idle_segments(), 2, "both were held at once");
        let (one, _) = storage_segment(&pool, big);
        drop(one);
        assert_eq!(pool.idle_segments(), 2);
    }
}
