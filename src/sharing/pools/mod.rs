//! The memory a context hands out again instead of making anew: the
//! memfds, `file_system` segments and `memmap` files of storages it
//! allocated, once nobody else holds them, and the `file_system` segments
//! it received, kept mapped for their senders to send again.
//!
//! Each of the three strategies that share memory has one [`Pool`], and
//! [`allocate`] is the one path through them all: take a free
//! segment and zero it, or make one and have the pool adopt it, and hand
//! it out [`Watched`], so that it comes back to its pool
//! when its storage dies. What makes a segment free is each pool's own
//! (its module says): its receivers' reports, the count in its header, the
//! kernel's open events.

mod aging;
mod by_length;
mod dormant;
mod memfds;
mod memmap_files;
mod parked;
mod segments;
pub(crate) mod watched;

use std::path::Path;
use std::sync::Arc;

use tensorshare_strategies::file_descriptor::FileIdentity;
use tensorshare_strategies::file_system::{
    DormantSegment, FileSystemSegment, FileSystemStrategy, SegmentName,
};
use tensorshare_strategies::{AllocateError, SharingStrategy, WritableSegment};

pub(crate) use aging::AgingMap;
pub(crate) use dormant::DormantMappings;
use dormant::DormantSegments;
pub(crate) use memfds::MemfdPool;
pub(crate) use memmap_files::MemmapPool;
pub(crate) use segments::RefcountedPool;
use watched::{Watched, Watcher};

use crate::model::{Storage, StorageWriter};
use crate::resource_sharer::KeyReports;

/// The most bytes of free segments a pool keeps for reuse, however much
/// its producer held at once.
const MAX_POOLED_BYTES: usize = 1 << 30;

/// The most `file_system` segments or `memmap` files a pool keeps: each
/// holds a mapping, of the 65530 `vm.max_map_count` allows by default.
const MAX_POOLED_MAPPINGS: usize = 8192;

/// What keeps a strategy's received segments between messages, and the
/// storage one becomes when it arrives: the step of receiving that depends
/// on who holds received memory (the pools here, the notices for fds that
/// arrived attached), taken by the context's one receive path.
pub(crate) trait Landing<S: SharingStrategy> {
    /// The mapping kept for `key` since the last storage of it died here,
    /// for the strategy to map the handle through again.
    fn take_dormant(&self, key: &S::Key) -> Option<S::Dormant> {
        let _ = key;
        None
    }

    /// The storage over `segment`, just mapped.
    fn storage_of(&self, segment: S::Segment) -> Storage;

    /// A handle joined `held`, a segment of a storage that this process
    /// holds already, instead of mapping it again.
    fn joined(&self, held: &S::Segment) {
        let _ = held;
    }
}

/// Received segments that nothing keeps: each a plain storage.
pub(crate) struct Unkept;

impl<S: SharingStrategy> Landing<S> for Unkept {
    fn storage_of(&self, segment: S::Segment) -> Storage {
        Storage::from_segment(Arc::new(segment))
    }
}

/// Received `file_system` segments stay mapped after their storage dies,
/// dormant, should their sender send them again.
impl Landing<FileSystemStrategy> for Pools {
    fn take_dormant(&self, name: &SegmentName) -> Option<DormantSegment> {
        self.dormant_segments.take(name)
    }

    fn storage_of(&self, segment: FileSystemSegment) -> Storage {
        Storage::from_segment(Arc::new(Watched::new(segment, &self.dormant_segments)))
    }
}

/// Segments of one strategy kept for reuse.
pub(crate) trait Pool: Watcher {
    /// A free segment of exactly `nbytes`, with whatever bytes its last
    /// storage left in it.
    fn take(&self, nbytes: usize) -> Option<Self::Segment>;

    /// Counts `segment`, just made for a storage, as the pool's from now
    /// on; `false` when the pool cannot follow it, and it goes unpooled.
    fn adopt(&self, segment: &Self::Segment) -> bool;

    /// Lets go of the free segments kept, when making one ran out of fds,
    /// memory or room: how many went.
    fn make_room(&self) -> usize;
}

/// A context's pools.
#[derive(Debug)]
pub(crate) struct Pools {
    /// Memfds, reused once their receivers have unmapped them.
    memfds: Arc<MemfdPool>,
    /// `file_system` segments, reused once their count says nobody else
    /// holds them.
    segments: Arc<RefcountedPool>,
    /// Received `file_system` segments kept mapped and registered after
    /// their storages died, for their senders to send again.
    dormant_segments: Arc<DormantSegments>,
}

impl Pools {
    /// Pools keeping at most `max_memfds` free memfds (each holds an fd).
    pub(crate) fn new(max_memfds: usize) -> Self {
        Self {
            memfds: Arc::new(MemfdPool::new(max_memfds, MAX_POOLED_BYTES)),
            segments: Arc::new(RefcountedPool::new(MAX_POOLED_MAPPINGS, MAX_POOLED_BYTES)),
            dormant_segments: Arc::default(),
        }
    }

    /// The memfds of storages allocated under `file_descriptor`.
    pub(crate) fn memfds(&self) -> &Arc<MemfdPool> {
        &self.memfds
    }

    /// The segments of storages allocated under `file_system`.
    pub(crate) fn segments(&self) -> &Arc<RefcountedPool> {
        &self.segments
    }

    /// Takes what the resource sharer saw of the keys memfds went under.
    pub(crate) fn take_memfd_reports(&self, reports: KeyReports) {
        self.memfds.take_reports(reports);
    }

    /// Records that the memfd `identity` went out under `key`.
    pub(crate) fn memfd_sent(&self, identity: FileIdentity, key: i64) {
        self.memfds.sent(identity, key);
    }

    /// Lets go of the `file_system` segments kept, and of the received
    /// segments kept dormant; the memfds stay until the pools go, as their
    /// receivers may still report them.
    pub(crate) fn clear(&self) {
        self.segments.make_room();
        self.dormant_segments.clear();
    }
}

/// A pool of the `memmap` files of `dir`: a context's handles that create
/// files in one directory share one.
pub(crate) fn memmap_pool(dir: &Path) -> Arc<MemmapPool> {
    Arc::new(MemmapPool::new(dir, MAX_POOLED_MAPPINGS, MAX_POOLED_BYTES))
}

/// A zero-filled storage of `nbytes` to write in place, in `strategy`'s
/// memory: a free segment of `pool`, else a new one that comes back
/// to the pool when its storage dies.
pub(crate) fn allocate<S, P>(
    pool: &Arc<P>,
    strategy: &S,
    nbytes: usize,
) -> Result<StorageWriter, AllocateError>
where
    S: SharingStrategy,
    S::Segment: 'static,
    P: Pool<Segment = S::Segment> + 'static,
{
    if nbytes == 0 {
        return Ok(StorageWriter::new(Box::new(strategy.allocate(0)?)));
    }
    if let Some(writer) = take(pool, nbytes) {
        return Ok(writer);
    }
    let segment = strategy.allocate(nbytes).or_else(|error| {
        // Out of fds, memory or room, perhaps to the pool: what it keeps
        // goes first.
        if pool.make_room() == 0 {
            return Err(error);
        }
        strategy.allocate(nbytes)
    })?;
    if !pool.adopt(&segment) {
        return Ok(StorageWriter::new(Box::new(segment)));
    }
    Ok(StorageWriter::new(Box::new(Watched::new(segment, pool))))
}

/// A free segment of `pool` of `nbytes`, zeroed, to write in place; it
/// comes back to the pool when its storage dies.
pub(crate) fn take<P>(pool: &Arc<P>, nbytes: usize) -> Option<StorageWriter>
where
    P: Pool + 'static,
    P::Segment: WritableSegment + 'static,
{
    let mut segment = pool.take(nbytes)?;
    segment.as_bytes_mut().fill(0);
    Some(StorageWriter::new(Box::new(Watched::new(segment, pool))))
}
