//! A storage's segment whose end is handed to someone who cares: the pool
//! that reuses it, or the board that tells its sender.

use std::any::Any;
use std::sync::{Arc, Weak};

use tensorshare_strategies::{Segment, StrategyKind, WritableSegment};

/// Who takes a [`Watched`] segment when its storage dies.
pub(crate) trait Watcher: Send + Sync + std::fmt::Debug + 'static {
    /// The segments it watches: memfds, or `file_system` segments.
    type Segment: WritableSegment + std::fmt::Debug;

    /// Takes the segment of a storage that died.
    fn ended(&self, segment: Self::Segment);
}

/// A segment that is the inner segment itself to every reader
/// ([`Segment::as_any`] is the inner segment's, so `local_segment` and
/// `downcast_ref` see through it), handed to its watcher when it is
/// dropped instead of being unmapped there.
#[derive(Debug)]
pub(crate) struct Watched<W: Watcher> {
    segment: Option<W::Segment>,
    /// The inner segment's kind, kept for after it went to the watcher.
    kind: StrategyKind,
    watcher: Weak<W>,
}

impl<W: Watcher> Watched<W> {
    pub(crate) fn new(segment: W::Segment, watcher: &Arc<W>) -> Self {
        Self {
            kind: segment.kind(),
            segment: Some(segment),
            watcher: Arc::downgrade(watcher),
        }
    }
}

impl<W: Watcher> Segment for Watched<W> {
    fn as_bytes(&self) -> &[u8] {
        self.segment.as_ref().map_or(&[], Segment::as_bytes)
    }

    fn kind(&self) -> StrategyKind {
        self.kind
    }

    fn as_any(&self) -> &dyn Any {
        match &self.segment {
            Some(segment) => segment.as_any(),
            None => self,
        }
    }

    fn can_export(&self) -> bool {
        self.segment.as_ref().is_some_and(Segment::can_export)
    }
}

impl<W: Watcher> WritableSegment for Watched<W> {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.segment
            .as_mut()
            .map_or(&mut [], WritableSegment::as_bytes_mut)
    }

    fn into_shared(self: Box<Self>) -> Arc<dyn Segment> {
        Arc::new(*self)
    }
}

impl<W: Watcher> Drop for Watched<W> {
    fn drop(&mut self) {
        if let (Some(segment), Some(watcher)) = (self.segment.take(), self.watcher.upgrade()) {
            watcher.ended(segment);
        }
    }
}
