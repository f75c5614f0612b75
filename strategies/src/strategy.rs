//! The strategy layer: the [`SharingStrategy`] trait, one module per
//! implementation, and what only they share: the segment traits, the
//! strategy kinds and the errors of the trait's operations.
//!
//! It is built on the platform layer (mappings, fd passing) and on the
//! services (`file_system` segments are registered with a shared-memory
//! manager; `memmap` reclaims its directory by `gc`'s rules). The crate
//! root re-exports all of it: the crate is named for the strategies.

pub mod bytes;
pub(crate) mod error;
pub mod file_descriptor;
pub mod file_system;
pub(crate) mod kind;
pub mod memmap;
pub(crate) mod segment;
pub(crate) mod sharing_strategy;

pub use error::{
    AllocateError, Exhausted, ExportError, ImportError, MAX_SEGMENT_BYTES, human_bytes,
};
pub use kind::{StrategyKind, UnknownStrategyError};
pub use segment::{Segment, WritableSegment};
pub use sharing_strategy::SharingStrategy;
