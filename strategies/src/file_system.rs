//! The `file_system` strategy: named POSIX shared-memory segments with
//! torch's reference-count header.

mod name;

pub use name::{InvalidSegmentName, MAX_SEGMENT_NAME_LEN, SegmentName};
