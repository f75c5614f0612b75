//! Memory held by this process on behalf of a storage.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::StrategyKind;

/// A region of memory mapped (or held) in this process that holds a
/// storage's bytes.
///
/// The runtime keeps segments as `Arc<dyn Segment>`; dropping the last
/// reference releases the memory (unmaps it, closes its fd, frees the heap
/// buffer). Release never panics.
///
/// # Shared memory and Rust's memory model
///
/// A segment of a strategy that [shares memory](StrategyKind::shares_memory)
/// maps pages that other processes map too, and they may write them at any
/// time: that is the point of sharing a tensor. Rust's memory model does not
/// describe writes made by another process, exactly as memmap2 warns for its
/// file-backed maps ("the underlying file may be modified, in or out of
/// process"). Within this process the types keep Rust's rules: a writable
/// segment is reached through `&mut` while it has one owner
/// ([`WritableSegment::as_bytes_mut`]), and only through `&` once frozen into
/// an `Arc` ([`WritableSegment::into_shared`]). Across processes, readers and
/// writers must agree on their own when the bytes are stable, as PyTorch
/// users do with shared tensors (queues, barriers, events). Bytes read while
/// another process writes may be any mix of old and new values; every bit
/// pattern is a valid `u8`, so such a read gives wrong numbers, never an
/// invalid value. Interpret the bytes through types with no invalid bit
/// patterns only.
///
/// Reading or writing a segment never kills the process with `SIGBUS`:
/// strategies check before mapping that the shared object covers every byte
/// of the segment, and seal it against shrinking where the kernel allows. An
/// object that cannot be sealed (a named `file_system` segment, a tmpfs fd
/// such as PyTorch sends) may still be truncated by another process that
/// holds it; the crate's fault guard then replaces each lost page, in this
/// process only, with a page of zeros, and the segment's `was_truncated`
/// ([`FdSegment::was_truncated`](crate::strategy::file_descriptor::FdSegment::was_truncated),
/// [`FileSystemSegment::was_truncated`](crate::strategy::file_system::FileSystemSegment::was_truncated))
/// turns `true`.
pub trait Segment: Send + Sync + fmt::Debug + 'static {
    /// The segment's bytes.
    fn as_bytes(&self) -> &[u8];

    /// The segment's length in bytes.
    fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// Whether the segment holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The strategy that made this segment.
    fn kind(&self) -> StrategyKind;

    /// The segment as [`Any`], to reach the concrete type (and its handle
    /// operations) from a `dyn Segment`; prefer [`downcast_ref`](#method.downcast_ref).
    fn as_any(&self) -> &dyn Any;

    /// Whether its strategy can export it as it is. `false` for a received
    /// `file_descriptor` segment that gave up its fd to stay within the
    /// process's fd budget
    /// ([`FdSegment::keep_fd_within`](crate::strategy::file_descriptor::FdSegment::keep_fd_within)):
    /// the runtime sends such a storage on as a copy.
    fn can_export(&self) -> bool {
        true
    }
}

impl dyn Segment {
    /// The concrete segment, if it is a `T`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tensorshare_strategies::file_descriptor::{FdSegment, FileDescriptorStrategy};
    /// use tensorshare_strategies::{Segment, SharingStrategy};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let shared: Arc<dyn Segment> = Arc::new(FileDescriptorStrategy.allocate(8)?);
    /// let fd_segment = shared.downcast_ref::<FdSegment>().expect("an fd segment");
    /// let _identity = fd_segment.identity();
    /// # Ok(())
    /// # }
    /// ```
    pub fn downcast_ref<T: Segment>(&self) -> Option<&T> {
        self.as_any().downcast_ref::<T>()
    }
}

/// A segment that still has a single owner, so its bytes may be written in
/// place: a producer allocates a storage directly in shared memory and fills
/// it with no extra copy.
///
/// The trait is object safe: [`crate::allocate_writable`] returns
/// `Box<dyn WritableSegment>`.
pub trait WritableSegment: Segment {
    /// The segment's bytes, writable.
    ///
    /// `&mut self` makes this the only reference in this process; see
    /// [`Segment`] for writes by other processes.
    fn as_bytes_mut(&mut self) -> &mut [u8];

    /// Freezes the segment for sharing inside this process: from now on it is
    /// read through `&` only.
    fn into_shared(self: Box<Self>) -> Arc<dyn Segment>;
}
