//! Received segments kept mapped after their storage died, for their
//! sender to reuse and send again.
//!
//! A tensorshare producer reuses a `file_system` segment once every holder
//! has counted itself out of its header, and sends the same name again.
//! A receiver that unmapped the segment and told its manager it let go
//! would map it and register it anew for every message: an `mmap`, page
//! faults, and a message that wakes the manager. A dormant segment keeps
//! the mapping and the registration, and holds no count: the producer sees
//! the segment free, as it is, and the receiver takes the mapping back when
//! the name arrives again, once the name is checked to still open the same
//! object.
//!
//! The registration kept is what a receiver holding the segment would have
//! kept: should this process die, its manager unlinks the name only if
//! nobody else registered it, and its creator has while it reuses it.

use super::{FileIdentity, ManagerHandle, MappedObject, SegmentName};

/// The mapping and manager registration of a received `file_system`
/// segment whose storage died here, its count given back. Dropping it
/// unmaps and tells the manager this process let go of the name.
#[derive(Debug)]
pub struct DormantSegment {
    object: MappedObject,
}

impl DormantSegment {
    /// Gives back `object`'s count and keeps the rest; `None` (everything
    /// let go) when that was the last count, so that the name is gone, or
    /// when the object was truncated under the mapping.
    pub(super) fn keep(mut object: MappedObject) -> Option<Self> {
        if object.mapping.was_truncated() {
            return None;
        }
        object.holds_count = false;
        let last = object.decref();
        (!last).then_some(Self { object })
    }

    /// The segment's name, under which its next message finds it.
    pub fn name(&self) -> &SegmentName {
        &self.object.name
    }

    /// How many bytes it maps, header included.
    pub fn len(&self) -> usize {
        self.object.mapping.len()
    }

    /// Whether it maps nothing; a segment always maps its header.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The mapping back, when it maps the object `identity` over `total`
    /// bytes and stays registered with `manager`; else `None`, and the
    /// dormant segment is let go.
    pub(super) fn wake(
        self,
        identity: FileIdentity,
        total: usize,
        manager: &ManagerHandle,
    ) -> Option<MappedObject> {
        let object = &self.object;
        let same = object.identity == identity
            && object.mapping.len() == total
            && !object.mapping.was_truncated()
            && object.manager.serves(manager);
        same.then_some(self.object)
    }
}
