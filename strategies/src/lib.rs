//! Shared-memory mechanisms for tensorshare.
//!
//! This crate holds every OS call and every line of `unsafe` code of the
//! project. It knows nothing of pickles or tensors: it moves bytes between
//! processes.
//!
//! - [`SharingStrategy`]: allocate a zero-filled writable segment, export a
//!   handle that can travel to another process, import such a handle there.
//!   One module per implementation: [`file_descriptor`] (memfd, the fd travels
//!   by `SCM_RIGHTS`) and [`bytes`] (the bytes themselves travel).
//! - [`Segment`] and [`WritableSegment`]: memory mapped or held in this
//!   process, type-erased so the runtime can keep `Arc<dyn Segment>`.
//! - [`fd_passing`]: `sendmsg`/`recvmsg` with `SCM_RIGHTS`, compatible with
//!   CPython's `multiprocessing.reduction.sendfds` and `recvfds`.
//!
//! # Example
//!
//! ```
//! use tensorshare_strategies::file_descriptor::FileDescriptorStrategy;
//! use tensorshare_strategies::{Segment, SharingStrategy, WritableSegment};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let strategy = FileDescriptorStrategy;
//! let mut segment = strategy.allocate(5)?;
//! segment.as_bytes_mut().copy_from_slice(b"hello");
//!
//! // The handle is what travels to the other process: here a duplicated fd.
//! let handle = strategy.export(&segment)?;
//! let received = strategy.import(handle, 5)?;
//! assert_eq!(received.as_bytes(), b"hello");
//! # Ok(())
//! # }
//! ```
//!
//! # Safety
//!
//! `unsafe` is denied at the crate root. Modules that need it opt in with
//! `#![allow(unsafe_code)]` and say in their own `# Safety` section what they
//! rely on: the private `mapping` module maps and unmaps memory, and
//! [`file_descriptor`] calls it after checking the file's size. Memory shared
//! with other processes is outside what Rust's memory model describes; the
//! [`Segment`] docs state the contract, as memmap2 does for file mappings.
#![deny(unsafe_code)]

pub mod bytes;
mod error;
pub mod fd_passing;
pub mod file_descriptor;
pub mod file_system;
mod kind;
mod mapping;
pub mod orphans;
mod segment;
pub mod shm_manager;
mod strategy;

pub use error::{AllocateError, ExportError, ImportError, MAX_SEGMENT_BYTES};
pub use kind::{StrategyKind, UnknownStrategyError};
/// The errno an OS failure carried; errors of this crate keep it.
pub use nix::errno::Errno;
pub use segment::{Segment, WritableSegment};
pub use strategy::SharingStrategy;

use bytes::BytesStrategy;
use file_descriptor::FileDescriptorStrategy;

/// Allocates a zero-filled writable segment of `nbytes` with the strategy
/// named by `kind`.
///
/// This is the type-erased door for callers that pick a strategy at run time
/// by name. Write into the segment with
/// [`as_bytes_mut`](WritableSegment::as_bytes_mut), then freeze it with
/// [`into_shared`](WritableSegment::into_shared).
///
/// # Errors
///
/// Whatever the strategy's [`SharingStrategy::allocate`] reports, and
/// [`AllocateError::Unsupported`] for a strategy this build cannot allocate
/// without further configuration (`file_system`, `memmap`).
///
/// # Examples
///
/// ```
/// use tensorshare_strategies::{allocate_writable, StrategyKind};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut segment = allocate_writable("bytes".parse()?, 3)?;
/// segment.as_bytes_mut().copy_from_slice(&[1, 2, 3]);
/// let frozen = segment.into_shared();
/// assert_eq!(frozen.as_bytes(), &[1, 2, 3]);
/// assert_eq!(frozen.kind(), StrategyKind::Bytes);
/// # Ok(())
/// # }
/// ```
pub fn allocate_writable(
    kind: StrategyKind,
    nbytes: usize,
) -> Result<Box<dyn WritableSegment>, AllocateError> {
    match kind {
        StrategyKind::FileDescriptor => Ok(Box::new(FileDescriptorStrategy.allocate(nbytes)?)),
        StrategyKind::Bytes => Ok(Box::new(BytesStrategy.allocate(nbytes)?)),
        StrategyKind::FileSystem | StrategyKind::Memmap => Err(AllocateError::Unsupported { kind }),
    }
}
