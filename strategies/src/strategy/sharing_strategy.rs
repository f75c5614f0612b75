//! The trait every sharing mechanism implements.

use std::fmt;
use std::hash::Hash;

use crate::{AllocateError, ExportError, ImportError, Segment, StrategyKind, WritableSegment};

/// One way of moving a storage's bytes to another process.
///
/// The life of a shared storage:
///
/// 1. the producer [allocates](SharingStrategy::allocate) a zero-filled
///    segment and writes into it in place;
/// 2. it [exports](SharingStrategy::export) a [`Handle`](SharingStrategy::Handle):
///    the thing that travels (a duplicated fd, a copy of the bytes, a segment
///    name, a path);
/// 3. the consumer [opens](SharingStrategy::open) the handle, looks up the
///    object's [key](SharingStrategy::received_key) among the storages it
///    holds, and either [joins](SharingStrategy::join_held) the handle to
///    the one it holds or [maps](SharingStrategy::map_received) it with the
///    byte count the message announced, getting a segment of exactly that
///    length ([`import`](SharingStrategy::import) does both steps);
/// 4. each side drops its segment when done: that unmaps, closes and frees,
///    and never panics; a strategy that can map an object again through an
///    old mapping keeps it [dormant](SharingStrategy::keep_dormant) first.
///
/// Implementations take `&self` so that a strategy can carry its
/// configuration (a directory, a shared-memory manager's address).
///
/// The conformance suite in this crate's `tests/conformance` runs the same
/// tests against every implementation.
pub trait SharingStrategy: Send + Sync {
    /// Which of the four strategies this is.
    const KIND: StrategyKind;

    /// The memory this strategy allocates and imports.
    type Segment: WritableSegment;

    /// What travels to the other process. Dropping a handle that was never
    /// imported releases what it holds (closes the fd, frees the copy).
    type Handle: Send + fmt::Debug;

    /// A handle from another process, [opened](SharingStrategy::open) and
    /// checked but not yet mapped: what a receiver holds while it looks for
    /// a mapping of the same object it has already.
    type Received: Send + fmt::Debug;

    /// Which shared object a segment or a received handle is: the key under
    /// which a receiver finds the storage it mapped from that object, so
    /// that one object arriving twice is one storage, as torch's
    /// `shared_cache` makes it.
    type Key: Clone + Eq + Hash + Send + Sync + fmt::Debug + 'static;

    /// A mapping kept after its segment is done with, for the next import
    /// of the same object to take instead of mapping (and faulting in) the
    /// object anew.
    type Dormant: Send + fmt::Debug;

    /// Allocates a zero-filled, writable segment of exactly `nbytes` bytes.
    ///
    /// `nbytes == 0` is valid and yields an empty segment.
    ///
    /// # Errors
    ///
    /// [`AllocateError`]: a size no mapping can hold, fd or memory exhaustion
    /// (with what to do about it), or the OS refusing to create or map the
    /// object.
    fn allocate(&self, nbytes: usize) -> Result<Self::Segment, AllocateError>;

    /// Makes a handle for `segment` that another process can import.
    ///
    /// The segment stays valid and owned by the caller; the handle is
    /// independent of it (a duplicated fd, a copy).
    ///
    /// # Errors
    ///
    /// [`ExportError`]: fd or memory exhaustion, or an OS failure.
    fn export(&self, segment: &Self::Segment) -> Result<Self::Handle, ExportError>;

    /// Opens and checks the object behind a handle from another process,
    /// without mapping it: its [key](SharingStrategy::received_key) is then
    /// known.
    ///
    /// # Errors
    ///
    /// [`ImportError`]: a handle that is not what this strategy shares (not
    /// shared memory, outside the allowed directory, another user's), fd
    /// exhaustion, or an OS failure.
    fn open(&self, handle: Self::Handle) -> Result<Self::Received, ImportError>;

    /// Maps an opened handle as a segment of exactly `nbytes` bytes, taking
    /// `dormant` instead of a new mapping when it is a mapping of the same
    /// object, of that length (else it is dropped).
    ///
    /// The handle comes from another process: an object smaller than
    /// `nbytes` is an error, never a fault when the bytes are later read. An
    /// object larger than `nbytes` is accepted and only its first `nbytes`
    /// bytes are visible.
    ///
    /// # Errors
    ///
    /// [`ImportError`]: an object smaller than `nbytes`, a size no mapping
    /// can hold, fd or memory exhaustion, or an OS failure.
    fn map_received(
        &self,
        received: Self::Received,
        nbytes: usize,
        dormant: Option<Self::Dormant>,
    ) -> Result<Self::Segment, ImportError>;

    /// Takes a received handle for an object this process maps already as
    /// `held`, instead of mapping it again: whatever the handle carries for
    /// its receiver (a `file_system` message's count) is accounted to
    /// `held`. The default drops the handle.
    ///
    /// # Errors
    ///
    /// [`ImportError::InvalidHandle`] when `received` names another object.
    fn join_held(&self, held: &Self::Segment, received: Self::Received) -> Result<(), ImportError> {
        let _ = (held, received);
        Ok(())
    }

    /// Keeps the mapping of a segment done with, when this strategy can map
    /// the same object again through it; `None` drops everything.
    fn keep_dormant(&self, segment: Self::Segment) -> Option<Self::Dormant>;

    /// The key of a received handle; `None` when the strategy shares no
    /// object (a copy is nobody else's).
    fn received_key(received: &Self::Received) -> Option<Self::Key>;

    /// The key of a segment, equal to the key of every handle exported from
    /// it once received; `None` as for [`received_key`](Self::received_key).
    fn segment_key(segment: &Self::Segment) -> Option<Self::Key>;

    /// Maps (or takes) the object behind `handle` as a segment of exactly
    /// `nbytes` bytes: [`open`](Self::open), then
    /// [`map_received`](Self::map_received).
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open) and [`map_received`](Self::map_received).
    fn import(&self, handle: Self::Handle, nbytes: usize) -> Result<Self::Segment, ImportError> {
        self.map_received(self.open(handle)?, nbytes, None)
    }

    /// The segment of this strategy behind a type-erased one, if it is one:
    /// how a runtime holding `Arc<dyn Segment>` reaches
    /// [`export`](Self::export).
    fn local(segment: &dyn Segment) -> Option<&Self::Segment> {
        segment.downcast_ref::<Self::Segment>()
    }

    /// The strategy's kind; the same as [`SharingStrategy::KIND`].
    fn kind(&self) -> StrategyKind {
        Self::KIND
    }
}
