//! The segments of storages that died here, waiting by length to be
//! allocated again: what the `file_system` and `memmap` pools share. Each
//! pool says when one of them is free; this says how many are kept and for
//! how long, and lets them go on time while the pool is idle too
//! ([`Expiring`](crate::sync::expiry::Expiring)).

use std::time::{Duration, Instant};

use tensorshare_strategies::Segment;
use tensorshare_strategies::platform::process::ExitSweep;

use super::by_length::{ByLength, kept_bytes_limit};
use crate::sync::expiry::ExpiringQueue;

/// How long a segment stays after its storage died here, waiting for its
/// receivers to let go of it or for an allocation of its size.
pub(crate) const PARKED_LIFETIME: Duration = Duration::from_secs(10);

/// How often at most the parked segments are looked at for those whose
/// every receiver has exited: each look reads `/proc` once per receiver.
const STRANDED_CHECK: Duration = Duration::from_secs(1);

/// How many segments of a length are looked at, oldest first, for one that
/// is free: receivers usually let go in the order they received.
const SCAN_LIMIT: usize = 16;

/// A segment that can tell whether nobody will ever give it back: every
/// process it was sent to has exited, some without letting go of it.
pub(crate) trait Strandable: Segment + Send + 'static {
    /// Whether every process it went to has exited, asking `exited` of
    /// each; `false` when they are not all known.
    fn is_stranded_by(&self, exited: &mut dyn FnMut(u32) -> bool) -> bool;
}

/// Segments by length, oldest first, with the bounds they are kept within.
#[derive(Debug)]
pub(crate) struct Parked<S> {
    pub(crate) queue: ByLength<S>,
    /// Bytes of the segments the pool made that are alive, in a storage or
    /// parked, and the most there ever were at once: up to that much is
    /// kept.
    pub(crate) tracked_bytes: usize,
    peak_tracked_bytes: usize,
    /// The most segments kept: each holds a mapping.
    max_segments: usize,
    /// The most bytes kept, whatever the producer held at once.
    max_bytes: usize,
    /// When the parked segments are next looked at for stranded ones.
    stranded: ExitSweep,
}

impl<S: Segment> Parked<S> {
    pub(crate) fn new(max_segments: usize, max_bytes: usize) -> Self {
        Self {
            queue: ByLength::default(),
            tracked_bytes: 0,
            peak_tracked_bytes: 0,
            max_segments,
            max_bytes,
            stranded: ExitSweep::new(STRANDED_CHECK),
        }
    }

    /// Counts a new segment of `nbytes` made for a storage.
    pub(crate) fn adopt(&mut self, nbytes: usize) {
        self.tracked_bytes += nbytes;
        self.peak_tracked_bytes = self.peak_tracked_bytes.max(self.tracked_bytes);
    }

    /// Takes back the segment of a storage that died here: parked, unless
    /// `reusable` says it is not; returns, forgotten, what is to be dropped
    /// once the pool's lock is released (it, when not reusable; those that
    /// no longer fit).
    pub(crate) fn take_back(&mut self, segment: S, reusable: bool, now: Instant) -> Vec<S> {
        if reusable {
            self.park(segment, now)
        } else {
            self.forget(std::slice::from_ref(&segment));
            vec![segment]
        }
    }

    /// Parks the segment of a storage that died; returns those that no
    /// longer fit, oldest first, already forgotten.
    fn park(&mut self, segment: S, now: Instant) -> Vec<S> {
        self.queue.push(segment, now);
        let byte_limit = kept_bytes_limit(self.max_bytes, self.peak_tracked_bytes);
        let mut evicted = Vec::new();
        while self.queue.segments() > self.max_segments || self.queue.bytes() > byte_limit {
            let Some(oldest) = self.queue.pop_oldest() else {
                break;
            };
            self.forget(std::slice::from_ref(&oldest));
            evicted.push(oldest);
        }
        evicted
    }

    /// Whether segments of `nbytes` are parked.
    pub(crate) fn has_len(&self, nbytes: usize) -> bool {
        self.queue.has_len(nbytes)
    }

    /// The oldest of the first few segments of `nbytes` that `is_free`
    /// says nobody else holds.
    pub(crate) fn take_free(
        &mut self,
        nbytes: usize,
        is_free: impl FnMut(&S) -> bool,
    ) -> Option<S> {
        self.queue.take_first(nbytes, SCAN_LIMIT, is_free)
    }

    /// Takes out and forgets the segments parked since before `cutoff`, or
    /// all of them.
    pub(crate) fn drain(&mut self, cutoff: Option<Instant>) -> Vec<S> {
        let drained = self.queue.drain(cutoff);
        self.forget(&drained);
        drained
    }

    /// Stops counting segments about to be dropped.
    fn forget(&mut self, segments: &[S]) {
        for segment in segments {
            self.tracked_bytes = self.tracked_bytes.saturating_sub(segment.len());
        }
    }
}

impl<S: Strandable> ExpiringQueue for Parked<S> {
    type Expired = S;

    /// Takes out and forgets the segments parked longer than the lifetime,
    /// and, at most once every [`STRANDED_CHECK`], those nobody will give
    /// back ([`Strandable`]), each pid asked once a look.
    fn take_expired(&mut self, now: Instant, expired: &mut Vec<S>) {
        if let Some(cutoff) = now.checked_sub(PARKED_LIFETIME) {
            let drained = self.drain(Some(cutoff));
            expired.extend(drained);
        }
        if self.queue.segments() == 0 {
            return;
        }
        if let Some(mut exited) = self.stranded.look(now) {
            let out = self
                .queue
                .drain_where(|segment| segment.is_stranded_by(&mut exited));
            self.forget(&out);
            expired.extend(out);
        }
    }

    /// The lifetime of the oldest parked segment, or the next look for
    /// stranded ones while any is parked: an idle pool wakes at most once
    /// a [`STRANDED_CHECK`], and not at all once empty.
    fn next_deadline(&mut self) -> Option<Instant> {
        let oldest = self.queue.oldest()?;
        Some((oldest + PARKED_LIFETIME).min(self.stranded.next_due()))
    }
}
