//! Mappings a receiver keeps after their storages died, for the next
//! message that names the same object: memfds whose sender was told they
//! are unmapped, and `file_system` segments whose counts were given back.
//! Their senders reuse the memory and send it again; the receiver takes
//! the mapping back instead of mapping the object anew. A dormant mapping
//! is never read.

use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tensorshare_strategies::SharingStrategy;
use tensorshare_strategies::file_descriptor::{DormantMapping, FileIdentity};
use tensorshare_strategies::file_system::{
    DormantSegment, FileSystemSegment, FileSystemStrategy, SegmentName,
};

use super::aging::AgingMap;
use super::watched::Watcher;
use crate::sync::lock;

/// How long a dormant mapping waits for its object to arrive again.
const DORMANT_LIFETIME: Duration = Duration::from_secs(2);

/// The most bytes one kind of dormant mappings holds: pages their senders
/// may have freed meanwhile stay allocated until the mapping goes.
const MAX_DORMANT_BYTES: usize = 32 << 20;

/// The most dormant mappings of one kind kept.
const MAX_DORMANT_MAPPINGS: usize = 4096;

/// Whether the oldest of `len` entries, in since `since`, goes at `now`:
/// too old, or one too many.
fn over(now: Instant, since: Instant, len: usize) -> bool {
    len > MAX_DORMANT_MAPPINGS || now.duration_since(since) > DORMANT_LIFETIME
}

/// A mapping that can be kept dormant: what finds it again, and its size.
pub(crate) trait Dormant: Send + std::fmt::Debug {
    type Key: Clone + Eq + Hash + Send + std::fmt::Debug;
    fn key(&self) -> Self::Key;
    fn len(&self) -> usize;
}

impl Dormant for DormantMapping {
    type Key = FileIdentity;

    fn key(&self) -> FileIdentity {
        self.identity()
    }

    fn len(&self) -> usize {
        DormantMapping::len(self)
    }
}

impl Dormant for DormantSegment {
    type Key = SegmentName;

    fn key(&self) -> SegmentName {
        self.name().clone()
    }

    fn len(&self) -> usize {
        DormantSegment::len(self)
    }
}

/// Dormant mappings by key, oldest first, within the caps.
#[derive(Debug)]
pub(crate) struct DormantMappings<D: Dormant> {
    mappings: AgingMap<D::Key, D>,
    bytes: usize,
}

impl<D: Dormant> Default for DormantMappings<D> {
    fn default() -> Self {
        Self {
            mappings: AgingMap::default(),
            bytes: 0,
        }
    }
}

/// The mappings a call let go of, for its caller to drop once it released
/// the lock it holds the mappings under: dropping a `file_system` one tells
/// its manager.
#[must_use = "drop it once the lock is released"]
pub(crate) struct Evicted<D>(Vec<D>);

impl<D: Dormant> DormantMappings<D> {
    pub(crate) fn put(&mut self, mapping: D, now: Instant) -> Evicted<D> {
        self.bytes += mapping.len();
        let replaced = self.mappings.insert(mapping.key(), mapping, now);
        if let Some(old) = &replaced {
            self.bytes -= old.len();
        }
        let mut evicted = self.evict(now);
        evicted.0.extend(replaced);
        evicted
    }

    pub(crate) fn take(&mut self, key: &D::Key, now: Instant) -> (Option<D>, Evicted<D>) {
        let evicted = self.evict(now);
        let mapping = self.mappings.remove(key);
        if let Some(mapping) = &mapping {
            self.bytes -= mapping.len();
        }
        (mapping, evicted)
    }

    /// Lets the oldest go until the rest are young enough and within the
    /// caps.
    fn evict(&mut self, now: Instant) -> Evicted<D> {
        let mut evicted = Vec::new();
        while let Some((_, mapping)) = self
            .mappings
            .pop_oldest_if(|since, len| self.bytes > MAX_DORMANT_BYTES || over(now, since, len))
        {
            self.bytes -= mapping.len();
            evicted.push(mapping);
        }
        Evicted(evicted)
    }
}

/// The `file_system` segments this process received, kept dormant when
/// their storages die here, if their senders send them again.
///
/// A torch sender never does, nor does a tensorshare sender for storages
/// it does not reuse: their segments, kept mapped, would hold memory their
/// creators freed. So a segment is kept only once its name has come back
/// after this process let go of it; until then only its name is noted.
#[derive(Debug, Default)]
pub(crate) struct DormantSegments {
    state: Mutex<SegmentsState>,
}

#[derive(Debug, Default)]
struct SegmentsState {
    segments: DormantMappings<DormantSegment>,
    /// Names of segments let go of here, and whether each came back since.
    let_go: AgingMap<SegmentName, bool>,
}

impl SegmentsState {
    /// Forgets the oldest names until the rest are young enough and few
    /// enough.
    fn forget_old(&mut self, now: Instant) {
        while self
            .let_go
            .pop_oldest_if(|since, len| over(now, since, len))
            .is_some()
        {}
    }
}

impl DormantSegments {
    /// The dormant segment named `name`, if one is kept; notes that the
    /// name came back.
    pub(super) fn take(&self, name: &SegmentName) -> Option<DormantSegment> {
        let now = Instant::now();
        let mut state = lock(&self.state);
        let (dormant, evicted) = state.segments.take(name, now);
        if dormant.is_some() || state.let_go.remove(name).is_some() {
            state.let_go.insert(name.clone(), true, now);
        }
        state.forget_old(now);
        drop(state);
        drop(evicted);
        dormant
    }

    /// Lets every dormant segment go: unmapped, and its manager told.
    pub(super) fn clear(&self) {
        // Dropped after the lock: each tells its manager.
        let dormant = std::mem::take(&mut *lock(&self.state));
        drop(dormant);
    }
}

impl Watcher for DormantSegments {
    type Segment = FileSystemSegment;

    fn ended(&self, segment: FileSystemSegment) {
        let now = Instant::now();
        let came_back = {
            let mut state = lock(&self.state);
            let came_back = state.let_go.remove(segment.name()) == Some(true);
            state.let_go.insert(segment.name().clone(), came_back, now);
            state.forget_old(now);
            came_back
        };
        if !came_back {
            // Unmapped and counted out here, outside the lock.
            return;
        }
        if let Some(dormant) = FileSystemStrategy::default().keep_dormant(segment) {
            // Dropped after the lock, as the statement ends.
            let evicted = lock(&self.state).segments.put(dormant, now);
            drop(evicted);
        }
    }
}

#[cfg(test)]
mod tests {
    use tensorshare_strategies::file_descriptor::FileDescriptorStrategy;

    use super::*;

    #[test]
    fn dormant_mappings_stay_within_their_caps() {
        let mut dormant = DormantMappings::default();
        let now = Instant::now();
        let big = MAX_DORMANT_BYTES / 2;
        let identities: Vec<FileIdentity> = (0..3)
            .map(|_| {
                let memfd = FileDescriptorStrategy.allocate(big).expect("memfd");
                let identity = memfd.identity();
                let kept = FileDescriptorStrategy.keep_dormant(memfd);
                drop(dormant.put(kept.expect("sealed"), now));
                identity
            })
            .collect();
        assert!(dormant.bytes <= MAX_DORMANT_BYTES);
        assert!(
            dormant.take(&identities[0], now).0.is_none(),
            "the oldest went"
        );
        assert!(dormant.take(&identities[2], now).0.is_some());
        assert!(
            dormant
                .take(&identities[1], now + DORMANT_LIFETIME * 2)
                .0
                .is_none(),
            "too old"
        );
        assert_eq!(dormant.bytes, 0);
    }
}
