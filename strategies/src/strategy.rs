//! The strategy layer: the [`SharingStrategy`] trait, one module per
//! implementation, and what only they share: the segment traits, the
//! strategy kinds and the errors of the trait's operations.
//!
//! It is built on the platform layer (mappings, fd passing) and on the
//! services (`file_system` segments are registered with a shared-memory
//! manager; `memmap` reclaims its directory by `gc`'s rules). The crate
//! root re-exports all of it: the crate is named for the strategies.

#[macro_use]
pub(crate) mod kind;

pub(crate) mod error;
pub(crate) mod segment;
pub(crate) mod sharing_strategy;

// Every strategy, one line each: its kind, its name, and the module and
// type that implement it. The kind, its name and its dispatch
// ([`StrategyKind::visit`]) are made from this list.
strategies! {
    /// A memfd per storage, whose fd the receiver fetches by `SCM_RIGHTS`
    /// (torch's default): zero-copy.
    FileDescriptor = "file_descriptor" in file_descriptor::FileDescriptorStrategy,
    /// A named segment in `/dev/shm` with torch's reference count,
    /// registered with a shared-memory manager: zero-copy, no fd per storage.
    FileSystem = "file_system" in file_system::FileSystemStrategy,
    /// The bytes travel inside the message, as plain `pickle.dumps(tensor)`
    /// writes them: a copy.
    Bytes = "bytes" in bytes::BytesStrategy,
    /// A file in the memmap directory that both sides map: zero-copy.
    Memmap = "memmap" in memmap::MemmapStrategy,
    #[cfg(tensorshare_tmpfile)]
    /// An unnamed file on disk whose fd travels as a memfd's does:
    /// zero-copy, nothing to leak. Built only with `--cfg
    /// tensorshare_tmpfile`, to show what adding a strategy takes.
    Tmpfile = "tmpfile" in tmpfile::TmpfileStrategy,
}

pub use error::{
    AllocateError, Exhausted, ExportError, ImportError, MAX_SEGMENT_BYTES, human_bytes,
};
pub use kind::{StrategyVisitor, UnknownStrategyError};
pub use segment::{Segment, WritableSegment};
pub use sharing_strategy::SharingStrategy;
