//! The `bytes` strategy: the bytes themselves travel.
//!
//! A segment is a [`HeapBuffer`]: a `Vec<u8>` when small, from 1 MiB on a
//! private mapping recycled through a process-wide pool, so that a stream of
//! large messages does not pay the page faults of fresh memory for every one.
//! A sender writes a segment's bytes to the socket from where they are, and
//! a receiver makes its segment with one copy out of the message
//! ([`BytesSegment::copy_of`]), the `memcpy` of `pickle.loads`, or, for a
//! large storage that is most of its message, with none: the storage keeps
//! the message's buffer ([`message_window`]). [`export`](SharingStrategy::export) and
//! [`import`](SharingStrategy::import) are the handle form of the trait: a
//! copy out, and a received buffer taken as it is.
//! Nothing is shared: writes on one side never show on the other
//! ([`StrategyKind::shares_memory`] is `false`). No fds, no shared mappings:
//! this strategy works wherever shared memory does not.

pub mod file_window;
pub mod heap;
pub mod message_window;

use std::any::Any;
use std::convert::Infallible;
use std::sync::Arc;

use crate::strategy::error::MAX_SEGMENT_BYTES;
use crate::{
    AllocateError, ExportError, ImportError, Segment, SharingStrategy, StrategyKind,
    WritableSegment,
};
use heap::HeapBuffer;

/// The `bytes` strategy. It has no configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BytesStrategy;

/// A heap buffer holding a storage's bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BytesSegment {
    bytes: HeapBuffer,
}

impl BytesSegment {
    /// Wraps bytes that are already in memory, without copying.
    pub fn from_vec(bytes: Vec<u8>) -> Self {
        BytesSegment {
            bytes: HeapBuffer::from_vec(bytes),
        }
    }

    /// A segment holding a copy of `bytes`: one copy, into a recycled or a
    /// fresh buffer ([`HeapBuffer::copy_of`]).
    ///
    /// # Errors
    ///
    /// [`AllocateError::Exhausted`] (memory) when the buffer cannot be allocated.
    pub fn copy_of(bytes: &[u8]) -> Result<BytesSegment, AllocateError> {
        HeapBuffer::copy_of(bytes).map(|bytes| BytesSegment { bytes })
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

impl SharingStrategy for BytesStrategy {
    const KIND: StrategyKind = StrategyKind::Bytes;
    type Segment = BytesSegment;
    /// A copy of the segment's bytes.
    type Handle = Vec<u8>;
    type Received = Vec<u8>;
    /// A copy is no shared object: received copies are never the same one.
    type Key = Infallible;
    /// A copy is taken, not mapped: there is no mapping to keep.
    type Dormant = Infallible;

    fn allocate(&self, nbytes: usize) -> Result<BytesSegment, AllocateError> {
        HeapBuffer::zeroed(nbytes).map(|bytes| BytesSegment { bytes })
    }

    fn export(&self, segment: &BytesSegment) -> Result<Vec<u8>, ExportError> {
        let nbytes = segment.bytes.len();
        let mut copy = Vec::new();
        copy.try_reserve_exact(nbytes)
            .map_err(|_| ExportError::OutOfMemory { nbytes })?;
        copy.extend_from_slice(&segment.bytes);
        Ok(copy)
    }

    fn open(&self, bytes: Vec<u8>) -> Result<Vec<u8>, ImportError> {
        Ok(bytes)
    }

    fn keep_dormant(&self, _segment: BytesSegment) -> Option<Infallible> {
        None
    }

    fn received_key(_bytes: &Vec<u8>) -> Option<Infallible> {
        None
    }

    fn segment_key(_segment: &BytesSegment) -> Option<Infallible> {
        None
    }

    fn map_received(
        &self,
        mut bytes: Vec<u8>,
        nbytes: usize,
        _dormant: Option<Infallible>,
    ) -> Result<BytesSegment, ImportError> {
        if nbytes > MAX_SEGMENT_BYTES {
            return Err(ImportError::TooLarge { nbytes });
        }
        let available = bytes.len() as u64;
        if bytes.len() < nbytes {
            return Err(ImportError::HandleTooSmall { nbytes, available });
        }
        bytes.truncate(nbytes);
        Ok(BytesSegment::from_vec(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_allocation_is_an_error_not_an_abort() {
        let err = BytesStrategy.allocate(MAX_SEGMENT_BYTES).unwrap_err();
        assert!(err.is_out_of_memory(), "{err}");
    }

    #[test]
    fn import_keeps_the_announced_prefix() {
        let segment = BytesStrategy.import(vec![1, 2, 3, 4], 2).expect("import");
        assert_eq!(segment.as_bytes(), [1, 2]);
    }

    #[test]
    fn copy_of_holds_the_bytes() {
        for nbytes in [0, 5, 3 << 20] {
            let bytes: Vec<u8> = (0..nbytes).map(|i| (i % 253) as u8).collect();
            let segment = BytesSegment::copy_of(&bytes).expect("copy_of");
            assert_eq!(segment.len(), nbytes);
            assert_eq!(segment.as_bytes(), bytes.as_slice());
            assert_eq!(BytesStrategy.export(&segment).expect("export"), bytes);
        }
    }
}
