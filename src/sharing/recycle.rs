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
//! storage dies there ([`Noticed`], [`NoticeBoard`]), and the sharer
//! collects those reports. A key fetched by a Python process is never
//! reported, so its segment is never reused: it is freed as always once the
//! pool gives up on it. Whatever the receivers say, only senders' own
//! segments are ever reused, and only the memory of a storage that died
//! here.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tensorshare_strategies::file_descriptor::{FdSegment, FileIdentity};
use tensorshare_strategies::{Segment, StrategyKind, WritableSegment};

use super::lock;
use super::release::Releases;

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
    /// Bytes of tracked segments, and the most there ever were at once:
    /// the pool keeps up to that much free.
    tracked_bytes: usize,
    peak_tracked_bytes: usize,
}

#[derive(Debug, Default)]
struct Tracked {
    /// Keys it was sent under that no receiver has reported yet.
    outstanding: Vec<i64>,
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

    /// Takes receivers' reports that the storages sent under `keys` are no
    /// longer mapped; a segment whose last key this was and whose storage
    /// died here becomes free.
    pub(crate) fn unmapped(&self, keys: Vec<i64>) {
        if keys.is_empty() {
            return;
        }
        let mut state = lock(&self.state);
        let now = Instant::now();
        for key in keys {
            let Some(identity) = state.keys.remove(&key) else {
                continue;
            };
            let Some(tracked) = state.tracked.get_mut(&identity) else {
                continue;
            };
            tracked.outstanding.retain(|&k| k != key);
            if tracked.outstanding.is_empty() {
                if let Some((_, segment)) = tracked.parked.take() {
                    self.make_idle(&mut state, identity, segment, now);
                }
            }
        }
    }

    /// Takes back the segment of a storage that died here: free at once if
    /// every receiver has reported it, else parked until they do.
    fn give_back(&self, segment: FdSegment) {
        let identity = segment.identity();
        let mut state = lock(&self.state);
        let now = Instant::now();
        state.expire(now);
        match state.tracked.get_mut(&identity) {
            Some(tracked) if tracked.outstanding.is_empty() => {
                self.make_idle(&mut state, identity, segment, now);
            }
            Some(tracked) => tracked.parked = Some((now, segment)),
            None => {}
        }
    }

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

    /// Frees every free segment: their fds and memory go back to the
    /// system (when allocating ran out of either).
    pub(crate) fn clear_idle(&self) {
        let mut state = lock(&self.state);
        let idle = std::mem::take(&mut state.idle);
        for (_, segment) in idle.into_values().flatten() {
            state.untrack(segment.identity(), segment.len());
        }
        state.idle_bytes = 0;
        state.idle_segments = 0;
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
        let stale: Vec<FileIdentity> = self
            .tracked
            .iter()
            .filter(|(_, tracked)| {
                tracked
                    .parked
                    .as_ref()
                    .is_some_and(|(since, _)| now.duration_since(*since) > PARKED_LIFETIME)
            })
            .map(|(identity, _)| *identity)
            .collect();
        for identity in stale {
            if let Some(nbytes) = self
                .tracked
                .get(&identity)
                .and_then(|tracked| tracked.parked.as_ref())
                .map(|(_, segment)| segment.len())
            {
                self.untrack(identity, nbytes);
            }
        }
        for segment in expired {
            self.untrack(segment.identity(), segment.len());
        }
    }

    /// Forgets the segment `identity` and the keys it waited for; a parked
    /// segment is freed with it.
    fn untrack(&mut self, identity: FileIdentity, nbytes: usize) {
        if let Some(tracked) = self.tracked.remove(&identity) {
            for key in tracked.outstanding {
                self.keys.remove(&key);
            }
            self.tracked_bytes = self.tracked_bytes.saturating_sub(nbytes);
        }
    }
}

/// A storage's segment from the pool: the memfd segment itself to every
/// reader ([`Segment::as_any`] is the `FdSegment`'s), given back to the
/// pool instead of unmapped when the storage dies.
#[derive(Debug)]
pub(crate) struct Pooled {
    segment: Option<FdSegment>,
    pool: Weak<SegmentPool>,
}

impl Pooled {
    pub(crate) fn new(segment: FdSegment, pool: &Arc<SegmentPool>) -> Self {
        Self {
            segment: Some(segment),
            pool: Arc::downgrade(pool),
        }
    }
}

impl Segment for Pooled {
    fn as_bytes(&self) -> &[u8] {
        self.segment.as_ref().map_or(&[], Segment::as_bytes)
    }

    fn kind(&self) -> StrategyKind {
        StrategyKind::FileDescriptor
    }

    fn as_any(&self) -> &dyn Any {
        match &self.segment {
            Some(segment) => segment.as_any(),
            None => self,
        }
    }
}

impl WritableSegment for Pooled {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.segment
            .as_mut()
            .map_or(&mut [], WritableSegment::as_bytes_mut)
    }

    fn into_shared(self: Box<Self>) -> Arc<dyn Segment> {
        Arc::new(*self)
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let (Some(segment), Some(pool)) = (self.segment.take(), self.pool.upgrade()) {
            pool.give_back(segment);
        }
    }
}

/// What this process owes the senders of the storages it received with
/// fds attached: the keys to report unmapped once each storage dies here.
#[derive(Debug)]
pub(crate) struct NoticeBoard {
    entries: Mutex<HashMap<FileIdentity, Notice>>,
    releases: Weak<Releases>,
}

#[derive(Debug)]
struct Notice {
    /// The sender's sharer.
    address: Vec<u8>,
    /// The keys the storage arrived under, one per message.
    keys: Vec<i64>,
    /// Mappings of it alive here.
    mapped: usize,
    /// Whether it was sent on: another process may map it now, and only
    /// the sender's own receivers could say when it stops.
    sent_on: bool,
}

impl NoticeBoard {
    pub(crate) fn new(releases: Weak<Releases>) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            releases,
        }
    }

    /// Wraps a segment just mapped from an fd that arrived attached under
    /// `key` from the sharer at `address`.
    pub(crate) fn noticed(
        self: &Arc<Self>,
        segment: FdSegment,
        address: &[u8],
        key: i64,
    ) -> Noticed {
        let identity = segment.identity();
        let mut entries = lock(&self.entries);
        let notice = entries.entry(identity).or_insert_with(|| Notice {
            address: address.to_vec(),
            keys: Vec::new(),
            mapped: 0,
            sent_on: false,
        });
        notice.mapped += 1;
        if notice.address == address {
            notice.keys.push(key);
        }
        Noticed {
            segment: Some(segment),
            board: Arc::downgrade(self),
        }
    }

    /// Adds `key` for a storage already mapped here that arrived again.
    pub(crate) fn arrived_again(&self, identity: FileIdentity, address: &[u8], key: i64) {
        if let Some(notice) = lock(&self.entries).get_mut(&identity) {
            if notice.address == address {
                notice.keys.push(key);
            }
        }
    }

    /// Marks the storage `identity` as sent on: its sender hears nothing.
    pub(crate) fn sent_on(&self, identity: FileIdentity) {
        if let Some(notice) = lock(&self.entries).get_mut(&identity) {
            notice.sent_on = true;
        }
    }

    /// One mapping of `identity` is gone: when it was the last, and the
    /// storage was not sent on, the sharer and keys to report unmapped.
    fn due(&self, identity: FileIdentity) -> Option<(Vec<u8>, Vec<i64>)> {
        let mut entries = lock(&self.entries);
        let notice = entries.get_mut(&identity)?;
        notice.mapped = notice.mapped.saturating_sub(1);
        if notice.mapped > 0 {
            return None;
        }
        let notice = entries.remove(&identity)?;
        (!notice.sent_on).then_some((notice.address, notice.keys))
    }
}

/// A received storage's segment whose sender hears when it is unmapped: the
/// memfd segment itself to every reader.
#[derive(Debug)]
pub(crate) struct Noticed {
    segment: Option<FdSegment>,
    board: Weak<NoticeBoard>,
}

impl Segment for Noticed {
    fn as_bytes(&self) -> &[u8] {
        self.segment.as_ref().map_or(&[], Segment::as_bytes)
    }

    fn kind(&self) -> StrategyKind {
        StrategyKind::FileDescriptor
    }

    fn as_any(&self) -> &dyn Any {
        match &self.segment {
            Some(segment) => segment.as_any(),
            None => self,
        }
    }
}

impl Drop for Noticed {
    fn drop(&mut self) {
        let Some(segment) = self.segment.take() else {
            return;
        };
        let identity = segment.identity();
        // Unmapped and closed before the sender may reuse the memory.
        drop(segment);
        let Some(board) = self.board.upgrade() else {
            return;
        };
        if let (Some((address, keys)), Some(releases)) =
            (board.due(identity), board.releases.upgrade())
        {
            releases.unmapped(address, keys);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorshare_strategies::SharingStrategy;
    use tensorshare_strategies::file_descriptor::FileDescriptorStrategy;

    fn pool() -> Arc<SegmentPool> {
        Arc::new(SegmentPool::new(16, 1 << 30))
    }

    /// A storage's segment from `pool`, as `SharingContext::allocate` makes
    /// it, and its identity.
    fn storage_segment(pool: &Arc<SegmentPool>, nbytes: usize) -> (Pooled, FileIdentity) {
        let segment = pool.take(nbytes).unwrap_or_else(|| {
            let segment = FileDescriptorStrategy.allocate(nbytes).expect("memfd");
            pool.adopt(segment.identity(), nbytes);
            segment
        });
        let identity = segment.identity();
        (Pooled::new(segment, pool), identity)
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
        pool.unmapped(vec![1, 99]);
        assert_eq!(pool.idle_segments(), 0, "key 2 is still out");
        pool.unmapped(vec![2]);
        assert_eq!(pool.idle_segments(), 1);
        assert_eq!(pool.take(4096).map(|s| s.identity()), Some(identity));
    }

    #[test]
    fn reports_before_the_storage_dies_count_once_it_does() {
        let pool = pool();
        let (segment, identity) = storage_segment(&pool, 4096);
        pool.sent(identity, 7);
        pool.unmapped(vec![7, 7]);
        assert_eq!(pool.idle_segments(), 0, "its storage is alive here");
        drop(segment);
        assert_eq!(pool.idle_segments(), 1);
    }

    #[test]
    fn keys_of_segments_it_did_not_make_are_ignored() {
        let pool = pool();
        let foreign = FileDescriptorStrategy.allocate(4096).expect("memfd");
        pool.sent(foreign.identity(), 3);
        pool.unmapped(vec![3]);
        pool.give_back(foreign);
        assert_eq!(pool.idle_segments(), 0);
    }

    #[test]
    fn keeps_at_most_its_limits() {
        let pool = Arc::new(SegmentPool::new(2, 1 << 30));
        let segments: Vec<_> = (0..3).map(|_| storage_segment(&pool, 4096).0).collect();
        drop(segments);
        assert_eq!(pool.idle_segments(), 2);
        pool.clear_idle();
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

    #[test]
    fn a_received_segment_is_due_when_its_last_mapping_goes() {
        let board = Arc::new(NoticeBoard::new(Weak::new()));
        let memfd = FileDescriptorStrategy.allocate(4096).expect("memfd");
        let identity = memfd.identity();
        let noticed = board.noticed(memfd, b"\0sharer", 5);
        assert!(noticed.as_any().downcast_ref::<FdSegment>().is_some());
        board.arrived_again(identity, b"\0sharer", 6);
        // Another sharer cannot vouch for this sender's memory.
        board.arrived_again(identity, b"\0elsewhere", 8);
        // A second mapping of the same memory (a longer view of it).
        let second = FileDescriptorStrategy.import(
            noticed
                .as_any()
                .downcast_ref::<FdSegment>()
                .expect("an fd segment")
                .try_clone_fd()
                .expect("dup"),
            4096,
        );
        let second = board.noticed(second.expect("mapped"), b"\0sharer", 7);
        assert_eq!(board.due(identity), None, "one mapping is left");
        assert_eq!(
            board.due(identity),
            Some((b"\0sharer".to_vec(), vec![5, 6, 7]))
        );
        drop((noticed, second));
        assert!(lock(&board.entries).is_empty());
    }

    #[test]
    fn a_received_segment_sent_on_is_never_due() {
        let board = Arc::new(NoticeBoard::new(Weak::new()));
        let memfd = FileDescriptorStrategy.allocate(4096).expect("memfd");
        let identity = memfd.identity();
        let noticed = board.noticed(memfd, b"\0sharer", 9);
        board.sent_on(identity);
        assert_eq!(board.due(identity), None);
        drop(noticed);
        assert!(lock(&board.entries).is_empty());
    }
}
