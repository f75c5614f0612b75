//! The `bytes` strategy: the bytes themselves travel.
//!
//! A segment is a heap buffer. Exporting copies the bytes out (that copy is
//! what goes into the message, as `pickle.dumps(tensor)` does with
//! `torch.storage._load_from_bytes`); importing takes the received buffer as
//! the segment without copying again. Nothing is shared: writes on one side
//! never show on the other ([`StrategyKind::shares_memory`] is `false`).
//! No fds, no mappings: this strategy works wherever shared memory does not.

use std::any::Any;
use std::sync::Arc;

use crate::error::MAX_SEGMENT_BYTES;
use crate::{
    AllocateError, Errno, ExportError, ImportError, Segment, SharingStrategy, StrategyKind,
    WritableSegment,
};

/// The `bytes` strategy. It has no configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BytesStrategy;

/// A heap buffer holding a storage's bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BytesSegment {
    bytes: Vec<u8>,
}

impl BytesSegment {
    /// Wraps bytes that are already in memory, without copying.
    pub fn from_vec(bytes: Vec<u8>) -> Self {
        BytesSegment { bytes }
    }

    /// The bytes, without copying.
    pub fn into_vec(self) -> Vec<u8> {
        self.bytes
    }
}

impl Segment for BytesSegment {
    fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn len(&self) -> usize {
        self.bytes.len()
    }

    fn kind(&self) -> StrategyKind {
        StrategyKind::Bytes
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl WritableSegment for BytesSegment {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    fn into_shared(self: Box<Self>) -> Arc<dyn Segment> {
        Arc::new(*self)
    }
}

/// A zero-filled buffer of `nbytes`, or `None` when the allocator refuses;
/// never aborts the process the way `vec![0; n]` does.
fn try_zeroed(nbytes: usize) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(nbytes).ok()?;
    // Within the reserved capacity: no reallocation.
    bytes.resize(nbytes, 0);
    Some(bytes)
}

impl SharingStrategy for BytesStrategy {
    const KIND: StrategyKind = StrategyKind::Bytes;
    type Segment = BytesSegment;
    /// A copy of the segment's bytes.
    type Handle = Vec<u8>;

    fn allocate(&self, nbytes: usize) -> Result<BytesSegment, AllocateError> {
        if nbytes > MAX_SEGMENT_BYTES {
            return Err(AllocateError::TooLarge { nbytes });
        }
        let bytes = try_zeroed(nbytes).ok_or(AllocateError::OutOfMemory {
            nbytes,
            errno: Errno::ENOMEM,
        })?;
        Ok(BytesSegment { bytes })
    }

    fn export(&self, segment: &BytesSegment) -> Result<Vec<u8>, ExportError> {
        let nbytes = segment.bytes.len();
        let mut copy = Vec::new();
        copy.try_reserve_exact(nbytes)
            .map_err(|_| ExportError::OutOfMemory { nbytes })?;
        copy.extend_from_slice(&segment.bytes);
        Ok(copy)
    }

    fn import(&self, mut bytes: Vec<u8>, nbytes: usize) -> Result<BytesSegment, ImportError> {
        if nbytes > MAX_SEGMENT_BYTES {
            return Err(ImportError::TooLarge { nbytes });
        }
        let available = bytes.len() as u64;
        if bytes.len() < nbytes {
            return Err(ImportError::HandleTooSmall { nbytes, available });
        }
        bytes.truncate(nbytes);
        Ok(BytesSegment { bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_allocation_is_an_error_not_an_abort() {
        let err = BytesStrategy.allocate(MAX_SEGMENT_BYTES).unwrap_err();
        assert!(matches!(err, AllocateError::OutOfMemory { .. }), "{err}");
    }

    #[test]
    fn import_keeps_the_announced_prefix() {
        let segment = BytesStrategy.import(vec![1, 2, 3, 4], 2).expect("import");
        assert_eq!(segment.into_vec(), vec![1, 2]);
    }
}
