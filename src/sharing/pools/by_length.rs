//! Segments queued by length, oldest first, with when each was queued: the
//! free lists of the pools. Each pool says which segments go in and how
//! long they stay; this keeps the count and the bytes.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use tensorshare_strategies::Segment;

/// The least bytes a pool keeps for reuse, however little the producer
/// held at once.
pub(crate) const MIN_KEPT_BYTES: usize = 64 << 20;

/// The most bytes a pool keeps for reuse: as many as its producer held at
/// once (`peak`), at least [`MIN_KEPT_BYTES`], at most `max`.
pub(crate) fn kept_bytes_limit(max: usize, peak: usize) -> usize {
    max.min(peak.max(MIN_KEPT_BYTES))
}

#[derive(Debug)]
pub(crate) struct ByLength<S> {
    queues: HashMap<usize, VecDeque<(Instant, S)>>,
    segments: usize,
    bytes: usize,
}

impl<S> Default for ByLength<S> {
    fn default() -> Self {
        Self {
            queues: HashMap::new(),
            segments: 0,
            bytes: 0,
        }
    }
}

impl<S> ByLength<S> {
    /// How many segments are queued.
    pub(crate) fn segments(&self) -> usize {
        self.segments
    }

    /// How many bytes the queued segments hold.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl<S: Segment> ByLength<S> {
    /// Queues `segment`, queued at `now`.
    pub(crate) fn push(&mut self, segment: S, now: Instant) {
        let len = segment.len();
        self.bytes += len;
        self.segments += 1;
        self.queues
            .entry(len)
            .or_default()
            .push_back((now, segment));
    }

    /// Whether segments of `nbytes` are queued.
    pub(crate) fn has_len(&self, nbytes: usize) -> bool {
        self.queues.contains_key(&nbytes)
    }

    /// The oldest of the first `scan` segments of `nbytes` that `wanted`
    /// accepts, taken out.
    pub(crate) fn take_first(
        &mut self,
        nbytes: usize,
        scan: usize,
        mut wanted: impl FnMut(&S) -> bool,
    ) -> Option<S> {
        let queue = self.queues.get_mut(&nbytes)?;
        let index = queue
            .iter()
            .take(scan)
            .position(|(_, segment)| wanted(segment))?;
        let (_, segment) = queue.remove(index)?;
        if queue.is_empty() {
            self.queues.remove(&nbytes);
        }
        self.taken(nbytes);
        Some(segment)
    }

    /// The oldest segment of `nbytes`, taken out.
    pub(crate) fn pop(&mut self, nbytes: usize) -> Option<S> {
        self.take_first(nbytes, 1, |_| true)
    }

    /// When the segment queued longest, and its length.
    fn oldest_entry(&self) -> Option<(Instant, usize)> {
        self.queues
            .iter()
            .filter_map(|(len, queue)| queue.front().map(|(since, _)| (*since, *len)))
            .min()
    }

    /// When the segment queued longest was queued.
    pub(crate) fn oldest(&self) -> Option<Instant> {
        self.oldest_entry().map(|(since, _)| since)
    }

    /// The segment queued longest, of any length, taken out.
    pub(crate) fn pop_oldest(&mut self) -> Option<S> {
        let (_, len) = self.oldest_entry()?;
        self.pop(len)
    }

    /// Takes out the segments queued before `cutoff`, or all of them.
    pub(crate) fn drain(&mut self, cutoff: Option<Instant>) -> Vec<S> {
        let mut drained = Vec::new();
        for queue in self.queues.values_mut() {
            while let Some((since, _)) = queue.front() {
                if cutoff.is_some_and(|cutoff| *since >= cutoff) {
                    break;
                }
                drained.extend(queue.pop_front().map(|(_, segment)| segment));
            }
        }
        self.queues.retain(|_, queue| !queue.is_empty());
        for segment in &drained {
            self.taken(segment.len());
        }
        drained
    }

    /// Takes out every segment `unwanted` says to.
    pub(crate) fn drain_where(&mut self, mut unwanted: impl FnMut(&S) -> bool) -> Vec<S> {
        let mut drained = Vec::new();
        for queue in self.queues.values_mut() {
            let (out, kept): (VecDeque<_>, VecDeque<_>) = std::mem::take(queue)
                .into_iter()
                .partition(|(_, segment)| unwanted(segment));
            *queue = kept;
            drained.extend(out.into_iter().map(|(_, segment)| segment));
        }
        self.queues.retain(|_, queue| !queue.is_empty());
        for segment in &drained {
            self.taken(segment.len());
        }
        drained
    }

    fn taken(&mut self, nbytes: usize) {
        self.bytes -= nbytes;
        self.segments -= 1;
    }
}
