//! Reusing the `file_system` segments of storages this process allocated,
//! once the reference count in their header says nobody else holds them.
//!
//! A fresh segment costs a manager round trip, a `shm_open`, sizing,
//! reserving and mapping, and its pages allocated and zeroed; dropping it
//! costs the unlink, the unmap and a message to the manager.
//! [`SharingContext::allocate`](crate::SharingContext::allocate) takes a
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
//! [lifetime](super::parked::PARKED_LIFETIME), its name left to the last
//! holder or the manager as without the pool; one whose every receiver has
//! exited is not pooled when its storage dies here, and is let go of within
//! about a second when that receiver exits while it is pooled
//! ([`FileSystemSegment::is_stranded`]), by the pool's own thread while
//! nothing is allocated. A pickle unpickled twice takes its count
//! back twice; that breaks torch's own counting too (the segment is
//! unlinked under its holders), and is outside the protocol.
//!
//! A pooled segment stays registered with the manager under this process,
//! as when it was allocated: if this process is killed, the manager still
//! unlinks it once nobody maps it.

use std::time::Instant;

use tensorshare_strategies::Segment;
use tensorshare_strategies::file_system::FileSystemSegment;

use super::Pool;
use super::parked::{Parked, Strandable};
use super::watched::Watcher;
use crate::sync::expiry::Expiring;

/// `file_system` segments this process allocated for storages that died
/// here, by length, oldest first; let go of on time while idle too.
#[derive(Debug)]
pub(crate) struct RefcountedPool {
    parked: Expiring<Parked<FileSystemSegment>>,
}

impl RefcountedPool {
    /// A pool keeping at most `max_segments` segments (each holds a
    /// mapping) and `max_bytes` bytes.
    pub(crate) fn new(max_segments: usize, max_bytes: usize) -> Self {
        let parked = Parked::new(max_segments, max_bytes);
        Self {
            parked: Expiring::new(parked, "tensorshare-segment-pool"),
        }
    }

    /// How many segments are pooled, free or not.
    #[cfg(test)]
    fn pooled(&self) -> usize {
        self.parked.read(|parked| parked.queue.segments())
    }
}

impl Strandable for FileSystemSegment {
    fn is_stranded_by(&self, exited: &mut dyn FnMut(u32) -> bool) -> bool {
        FileSystemSegment::is_stranded_by(self, exited)
    }
}

impl Pool for RefcountedPool {
    /// A pooled segment of exactly `nbytes` that nobody else holds.
    fn take(&self, nbytes: usize) -> Option<FileSystemSegment> {
        self.parked
            .update(|parked| parked.take_free(nbytes, is_free))
    }

    fn adopt(&self, segment: &FileSystemSegment) -> bool {
        self.parked
            .update(|parked| parked.adopt(segment.as_bytes().len()));
        true
    }

    /// Lets go of every pooled segment.
    fn make_room(&self) -> usize {
        // Unmapped, uncounted and unregistered outside the lock.
        let drained = self.parked.update(|parked| parked.drain(None));
        drained.len()
    }
}

impl Watcher for RefcountedPool {
    type Segment = FileSystemSegment;

    /// Pools the segment of a storage that died here, or lets go of it
    /// when the pool holds enough, or when its count is stranded by
    /// receivers that exited (it would never come back: the manager
    /// unlinks it once nothing maps it).
    fn ended(&self, segment: FileSystemSegment) {
        let reusable = !segment.was_truncated() && !segment.is_stranded();
        let now = Instant::now();
        // Unmapped, uncounted and unregistered outside the lock.
        let dropped = self
            .parked
            .update(|parked| parked.take_back(segment, reusable, now));
        drop(dropped);
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
    use std::time::Duration;

    use super::super::parked::PARKED_LIFETIME;
    use super::super::watched::Watched;
    use super::*;
    use crate::sync::expiry::ExpiringQueue;
    use tensorshare_strategies::file_system::{FileSystemStrategy, SegmentHandle, SegmentName};
    use tensorshare_strategies::services::shm_manager::{self, ManagerServer, ServeOptions};
    use tensorshare_strategies::{Segment, SharingStrategy, WritableSegment};

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
            pool.adopt(&segment);
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

        let later = Instant::now() + PARKED_LIFETIME + Duration::from_secs(1);
        let (expired, left) = pool.parked.update(|parked| {
            let mut expired = Vec::new();
            parked.take_expired(later, &mut expired);
            let left = (parked.queue.segments(), parked.queue.bytes());
            (expired, (left, parked.tracked_bytes))
        });
        assert_eq!((expired.len(), left), (2, ((0, 0), 0)));
    }

    /// Nothing allocated, nothing ending: the pool's own thread lets go of
    /// what it parked once its lifetime has passed.
    #[test]
    fn an_idle_pool_lets_go_of_its_segments_on_time() {
        let strategy = strategy();
        let pool = pool();
        drop(storage_segment(&pool, &strategy, 4096).0);
        assert_eq!(pool.pooled(), 1);
        let parked = Instant::now();
        let deadline = parked + PARKED_LIFETIME + Duration::from_secs(5);
        while pool.pooled() > 0 {
            assert!(Instant::now() < deadline, "the idle pool kept its segment");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            parked.elapsed() >= PARKED_LIFETIME,
            "let go of before its lifetime"
        );
    }
}
