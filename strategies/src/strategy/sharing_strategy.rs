//! The trait every sharing mechanism implements.

use std::fmt;

use crate::{AllocateError, ExportError, ImportError, StrategyKind, WritableSegment};

/// One way of moving a storage's bytes to another process.
///
/// The life of a shared storage:
///
/// 1. the producer [allocates](SharingStrategy::allocate) a zero-filled
///    segment and writes into it in place;
/// 2. it [exports](SharingStrategy::export) a [`Handle`](SharingStrategy::Handle):
///    the thing that travels (a duplicated fd, a copy of the bytes, a segment
///    name, a path);
/// 3. the consumer [imports](SharingStrategy::import) the handle with the
///    byte count the message announced, and gets a segment of exactly that
///    length;
/// 4. each side drops its segment when done: that unmaps, closes and frees,
///    and never panics.
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

    /// Maps (or takes) the object behind `handle` as a segment of exactly
    /// `nbytes` bytes.
    ///
    /// The handle comes from another process and is checked before use: an
    /// object smaller than `nbytes` is an error, never a fault when the bytes
    /// are later read. An object larger than `nbytes` is accepted and only its
    /// first `nbytes` bytes are visible.
    ///
    /// # Errors
    ///
    /// [`ImportError`]: a handle that is not what this strategy shares, an
    /// object smaller than `nbytes`, a size no mapping can hold, fd or memory
    /// exhaustion, or an OS failure.
    fn import(&self, handle: Self::Handle, nbytes: usize) -> Result<Self::Segment, ImportError>;

    /// The strategy's kind; the same as [`SharingStrategy::KIND`].
    fn kind(&self) -> StrategyKind {
        Self::KIND
    }
}
