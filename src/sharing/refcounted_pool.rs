//! Reusing the `file_system` segments of storages this process allocated,
//! once the reference count in their header says nobody else holds them.
//!
//! A fresh segment costs a manager round trip, a `shm_open`, sizing,
//! reserving and mapping, and its pages allocated and zeroed; dropping it
//! costs the unlink, the unmap and a message to the manager.
//! [`SharingContext::allocate`](super::SharingContext::allocate) takes a
//! segment of the right size from [`RefcountedPool`] instead when one is
//! free, and zeroes it; the segment of a storage allocated there comes back
//! to the pool when the storage dies here.
//!
//! # When a segment is free
//!
//! A segment is reused only when the storage it was allocated for died in
//! this process and its header's count reads 1, the creator's own count,
//! which the pool holds. That is enough, with no report from anyone:
//!
//! - every message that names the segment adds a count before it is sent
//!   (torch's `reduce_storage` calls `_shared_incref`; ours is
//!   [`SharingStrategy::export`](tensorshare_strategies::SharingStrategy::export)),
//!   and only its receiver takes that count back, after it has opened the
//!   segment and counted itself (torch's `rebuild_storage_filename`:
//!   `_new_shared_filename_cpu` counts the new holder, then
//!   `_shared_decref`; a receiver that holds the segment already takes the
//!   message's count back alone). A message in flight, not yet opened,
//!   thus keeps the count above 1 however long it waits;
//! - every holder, torch's `RefcountedMapAllocator` and ours, counts
//!   itself while it maps the segment and takes its count away as it
//!   unmaps;
//! - nobody can add a count to a segment in the pool: only a holder sends
//!   it on or maps it anew, and there is none; this process sends it again
//!   only after handing it out for a new storage.
//!
//! The count is read with acquire ordering, pairing with the release of
//! each holder's decrement, so whatever a receiver wrote before it let go
//! is behind the zeroing. A segment whose header was lost to a truncation
//! ([`FileSystemSegment::was_truncated`]) is never reused.
//!
//! A message that never reaches a receiver that takes its count back (its
//! receiver died first, or never unpickled it) keeps its segment above 1
//! for good: such a segment is never reused and leaves the pool at its
//! [lifetime](POOLED_LIFETIME), its name left to the last holder or the
//! manager as without the pool. A pickle unpickled twice takes its count
//! back twice; that breaks torch's own counting too (the segment is
//! unlinked under its holders), and is outside the protocol.
//!
//! A pooled segment stays registered with the manager under this process,
//! as when it was allocated: if this process is killed, the manager still
//! unlinks it once nobody maps it.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tensorshare_strategies::Segment;
use tensorshare_strategies::file_system::FileSystemSegment;

use super::lock;
use super::watched::Watcher;

/// How long a segment stays in the pool after its storage died here,
/// waiting for its receivers to let go of it or for an allocation of its
/// size.
pub(crate) const POOLED_LIFETIME: Duration = Duration::from_secs(10);

/// How many pooled segments are looked at, oldest first, for one that is
/// free: receivers usually let go in the order they received.
const SCAN_LIMIT: usize = 16;

/// The least bytes the pool may keep, however little the producer held at
/// once.
const MIN_POOLED_BYTES: usize = 64 << 20;

/// `file_system` segments this process allocated for storages that died
/// here, by length, oldest first.
#[derive(Debug)]
pub(crate) struct RefcountedPool {
    state: Mutex<PoolState>,
    /// The most segments pooled: each holds a mapping.
    max_segments: usize,
    /// The most bytes pooled, whatever the producer held at once.
    max_bytes: usize,
}

#[derive(Debug, Default)]
struct PoolState {
    by_len: HashMap<usize, VecDeque<(Instant, FileSystemSegment)>>,
    segments: usize,
    bytes: usize,
    /// Bytes of the segments the pool made that are alive, in a storage or
    /// pooled, and the most there ever were at once: the pool keeps up to
    /// that much.
    tracked_bytes: usize,
    peak_tracked_bytes: usize,
}

impl RefcountedPool {
    /// A pool keeping at most `max_segments` segments and `max_bytes` bytes.
    pub(crate) fn new(max_segments: usize, max_bytes: usize) -> Self {
        Self {
            state: Mutex::new(PoolState::default()),
            max_segments,
            max_bytes,
        }
    }

    /// A pooled segment of exactly `nbytes` that nobody else holds, with
    /// whatever bytes its last storage left in it.
    pub(crate) fn take(&self, nbytes: usize) -> Option<FileSystemSegment> {
        let (taken, expired) = {
            let mut state = lock(&self.state);
            let expired = state.expire(Instant::now());
            (state.take_free(nbytes), expired)
        };
        // Unmapped, uncounted and unregistered outside the lock.
        drop(expired);
        taken
    }

    /// Starts tracking a new segment of `nbytes` made for a storage.
    pub(crate) fn adopt(&self, nbytes: usize) {
        let mut state = lock(&self.state);
        state.tracked_bytes += nbytes;
        state.peak_tracked_bytes = state.peak_tracked_bytes.max(state.tracked_bytes);
    }

    /// Lets go of every pooled segment (when allocating ran out of shared
    /// memory); how many there were.
    pub(crate) fn clear(&self) -> usize {
        let drained = {
            let mut state = lock(&self.state);
            let drained = state.drain(None);
            state.forget(&drained);
            drained
        };
        drained.len()
    }

    /// How many segments are pooled, free or not.
    #[cfg(test)]
    fn pooled(&self) -> usize {
        lock(&self.state).segments
    }
}

impl Watcher for RefcountedPool {
    type Segment = FileSystemSegment;

    /// Pools the segment of a storage that died here, or lets go of it
    /// when the pool holds enough.
    fn ended(&self, segment: FileSystemSegment) {
        let now = Instant::now();
        let dropped = {
            let mut state = lock(&self.state);
            let mut dropped = state.expire(now);
            if segment.was_truncated() {
                state.forget(std::slice::from_ref(&segment));
                dropped.push(segment);
            } else {
                state.push(segment, now);
                let byte_limit = self
                    .max_bytes
                    .min(state.peak_tracked_bytes.max(MIN_POOLED_BYTES));
                while state.segments > self.max_segments || state.bytes > byte_limit {
                    let Some(oldest) = state.pop_oldest() else {
                        break;
                    };
                    state.forget(std::slice::from_ref(&oldest));
                    dropped.push(oldest);
                }
            }
            dropped
        };
        drop(dropped);
    }
}

impl PoolState {
    fn push(&mut self, segment: FileSystemSegment, now: Instant) {
        let len = segment.as_bytes().len();
        self.bytes += len;
        self.segments += 1;
        self.by_len
            .entry(len)
            .or_default()
            .push_back((now, segment));
    }

    /// The oldest of the first few segments of `nbytes` whose count is
    /// back at the creator's own.
    fn take_free(&mut self, nbytes: usize) -> Option<FileSystemSegment> {
        let queue = self.by_len.get_mut(&nbytes)?;
        let index = queue
            .iter()
            .take(SCAN_LIMIT)
            .position(|(_, segment)| is_free(segment))?;
        let (_, segment) = queue.remove(index)?;
        if queue.is_empty() {
            self.by_len.remove(&nbytes);
        }
        self.bytes -= nbytes;
        self.segments -= 1;
        Some(segment)
    }

    /// Takes out the segment pooled longest, of any length.
    fn pop_oldest(&mut self) -> Option<FileSystemSegment> {
        let len = self
            .by_len
            .iter()
            .filter_map(|(len, queue)| queue.front().map(|(since, _)| (*since, *len)))
            .min()?
            .1;
        let queue = self.by_len.get_mut(&len)?;
        let (_, segment) = queue.pop_front()?;
        if queue.is_empty() {
            self.by_len.remove(&len);
        }
        self.bytes -= len;
        self.segments -= 1;
        Some(segment)
    }

    /// Takes out the segments pooled since before `cutoff`, or all of them.
    fn drain(&mut self, cutoff: Option<Instant>) -> Vec<FileSystemSegment> {
        let mut drained = Vec::new();
        for queue in self.by_len.values_mut() {
            while let Some((since, _)) = queue.front() {
                if cutoff.is_some_and(|cutoff| *since >= cutoff) {
                    break;
                }
                drained.extend(queue.pop_front().map(|(_, segment)| segment));
            }
        }
        self.by_len.retain(|_, queue| !queue.is_empty());
        for segment in &drained {
            self.bytes -= segment.as_bytes().len();
            self.segments -= 1;
        }
        drained
    }

    /// Takes out the segments pooled longer than the lifetime, to be
    /// dropped once the lock is released.
    fn expire(&mut self, now: Instant) -> Vec<FileSystemSegment> {
        let Some(cutoff) = now.checked_sub(POOLED_LIFETIME) else {
            return Vec::new();
        };
        let expired = self.drain(Some(cutoff));
        self.forget(&expired);
        expired
    }

    /// Stops tracking segments about to be dropped.
    fn forget(&mut self, segments: &[FileSystemSegment]) {
        for segment in segments {
            self.tracked_bytes = self.tracked_bytes.saturating_sub(segment.as_bytes().len());
        }
    }
}

/// Whether nobody but the pool holds `segment`: no receiver maps it and no
/// message that names it is waiting to be opened (see the module's docs).
fn is_free(segment: &FileSystemSegment) -> bool {
    segment.refcount() == 1 && !segment.was_truncated()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::watched::Watched;
    use super::*;
    use tensorshare_strategies::file_system::{FileSystemStrategy, SegmentHandle, SegmentName};
    use tensorshare_strategies::services::shm_manager::{self, ManagerServer, ServeOptions};
    use tensorshare_strategies::{SharingStrategy, WritableSegment};

    fn pool() -> Arc<RefcountedPool> {
        Arc::new(RefcountedPool::new(64, 1 << 30))
    }

    /// A strategy registering with a manager served on a thread of this
    /// process, made the process's own, so that no daemon is started.
    fn strategy() -> FileSystemStrategy {
        static MANAGER: std::sync::Once = std::sync::Once::new();
        MANAGER.call_once(|| {
            let server = ManagerServer::bind_in_private_dir().expect("bind a manager");
            let handle = server.handle().clone();
            let options = ServeOptions::default().with_idle_timeout(Duration::from_secs(3600));
            std::thread::spawn(move || server.serve(options));
            let connection = shm_manager::connect(&handle).expect("connect to the manager");
            shm_manager::set_own_manager(connection);
        });
        FileSystemStrategy::default()
    }

    /// A storage's segment from `pool`, as `SharingContext::allocate`
    /// makes it, and its name.
    fn storage_segment(
        pool: &Arc<RefcountedPool>,
        strategy: &FileSystemStrategy,
        nbytes: usize,
    ) -> (Watched<RefcountedPool>, SegmentName) {
        let segment = pool.take(nbytes).unwrap_or_else(|| {
            let segment = strategy.allocate(nbytes).expect("segment");
            pool.adopt(nbytes);
            segment
        });
        let name = segment.name().clone();
        (Watched::new(segment, pool), name)
    }

    fn name_of(watched: &Watched<RefcountedPool>) -> &SegmentName {
        watched
            .as_any()
            .downcast_ref::<FileSystemSegment>()
            .expect("a file_system segment")
            .name()
    }

    #[test]
    fn a_segment_nobody_else_counts_is_reused_once_its_storage_dies() {
        let (pool, strategy) = (pool(), strategy());
        let (first, name) = storage_segment(&pool, &strategy, 4096);
        assert_eq!(name_of(&first), &name);
        drop(first);
        assert_eq!(pool.pooled(), 1);
        let (again, same) = storage_segment(&pool, &strategy, 4096);
        assert_eq!(same, name);
        let (_, other_size) = storage_segment(&pool, &strategy, 8192);
        assert_ne!(other_size, name);
        drop(again);
    }

    #[test]
    fn a_message_in_flight_keeps_its_segment_out_of_reuse() {
        let (pool, strategy) = (pool(), strategy());
        let (mut first, name) = storage_segment(&pool, &strategy, 4096);
        first.as_bytes_mut().fill(9);
        let segment = first
            .as_any()
            .downcast_ref::<FileSystemSegment>()
            .expect("a file_system segment");
        // Pickled for a message not yet opened by its receiver.
        let (manager, sent_name) = strategy.export(segment).expect("export").into_parts();
        drop(first);
        let (other, other_name) = storage_segment(&pool, &strategy, 4096);
        assert_ne!(other_name, name, "a message still counts it");

        // Its receiver opens it, counting itself, and takes the message's
        // count back: still held.
        let handle = SegmentHandle::received(manager, sent_name);
        let received = strategy.import(handle, 4096).expect("import");
        assert_eq!(received.as_bytes(), &[9; 4096][..]);
        let (another, another_name) = storage_segment(&pool, &strategy, 4096);
        assert!(another_name != name, "its receiver still maps it");

        drop(received);
        let (again, again_name) = storage_segment(&pool, &strategy, 4096);
        assert_eq!(again_name, name, "free once the receiver let go");
        drop((other, another, again));
    }

    #[test]
    fn segments_past_their_lifetime_or_the_limits_go() {
        let strategy = strategy();
        let pool = Arc::new(RefcountedPool::new(2, 1 << 30));
        let segments: Vec<_> = (0..3)
            .map(|_| storage_segment(&pool, &strategy, 4096).0)
            .collect();
        drop(segments);
        assert_eq!(pool.pooled(), 2);

        let mut state = lock(&pool.state);
        let expired = state.expire(Instant::now() + POOLED_LIFETIME + Duration::from_secs(1));
        assert_eq!((expired.len(), state.segments, state.bytes), (2, 0, 0));
        assert_eq!(state.tracked_bytes, 0);
    }
}
