//! Received storages that keep the message they arrived in, instead of a
//! copy of their part of it.
//!
//! A storage sent with the `bytes` strategy travels inside its message, and
//! the receiver reads the whole message into one buffer. Copying the
//! storage out of it is one more pass over every byte, after the two the
//! kernel makes (out of the sender's memory, into the receiver's): for a
//! large storage, a third of the transfer. When a storage's bytes are most
//! of the buffer, the storage keeps the buffer itself ([`MessageWindow`]).
//! When it is dropped, the buffer goes to a process-wide pool, from which a
//! connection takes its next receive buffer
//! ([`take_message_buffer`]), its pages already faulted in, as they would
//! be had the storage been copied out and the buffer reused.
//!
//! Memory stays bounded by what was received: a window keeps a buffer only
//! when its bytes are at least half of the buffer's capacity, so no more
//! than twice what the storage holds is kept for it, and the pool keeps at
//! most 4 buffers and 512 MiB. Nothing
//! here parses: the range comes from the decoder, which checked it against
//! the message, and is checked again against the buffer.

use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use super::BytesSegment;
use crate::{AllocateError, Segment, StrategyKind};

/// Storages of at least this many bytes keep their message buffer; below
/// it, a copy costs little and frees the buffer for the next message.
pub const KEEP_MIN_BYTES: usize = 1 << 20;

/// The most buffers the pool keeps.
const POOL_MAX_BUFFERS: usize = 4;

/// The most bytes (of capacity) the pool keeps.
const POOL_MAX_BYTES: usize = 512 << 20;

/// Message buffers given back by dropped windows.
static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A storage's bytes left where they arrived: a range of a received
/// message's buffer, which it keeps alive.
///
/// Read-only, as every received storage is behind an `Arc<dyn Segment>`.
/// Its [`kind`](Segment::kind) is [`StrategyKind::Bytes`]: sent on, its
/// bytes are written from where they are.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use tensorshare_strategies::bytes::message_window::{KEEP_MIN_BYTES, MessageWindow};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // A message whose bytes 100.. are a storage's.
/// let message = Arc::new(vec![7u8; 100 + KEEP_MIN_BYTES]);
/// let storage = MessageWindow::keep_or_copy(Arc::clone(&message), 100..message.len())?;
/// assert_eq!(storage.len(), KEEP_MIN_BYTES);
/// // Kept, not copied: the storage's bytes are the message's.
/// assert_eq!(storage.as_bytes().as_ptr(), message[100..].as_ptr());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct MessageWindow {
    /// `None` only while dropping.
    buffer: Option<Arc<Vec<u8>>>,
    range: Range<usize>,
}

impl MessageWindow {
    /// The bytes at `range` of `buffer` as a segment: the buffer itself
    /// when they are at least [`KEEP_MIN_BYTES`] and half its capacity,
    /// else a copy (a [`BytesSegment`]).
    ///
    /// # Errors
    ///
    /// [`AllocateError::TooLarge`] when `range` does not lie inside
    /// `buffer`; [`AllocateError::Exhausted`] (memory) when a copy cannot be
    /// allocated.
    pub fn keep_or_copy(
        buffer: Arc<Vec<u8>>,
        range: Range<usize>,
    ) -> Result<Arc<dyn Segment>, AllocateError> {
        let Some(bytes) = buffer.get(range.clone()) else {
            return Err(AllocateError::TooLarge {
                nbytes: range.len(),
            });
        };
        let keep =
            bytes.len() >= KEEP_MIN_BYTES && bytes.len().saturating_mul(2) >= buffer.capacity();
        if !keep {
            return Ok(Arc::new(BytesSegment::copy_of(bytes)?));
        }
        Ok(Arc::new(MessageWindow {
            buffer: Some(buffer),
            range,
        }))
    }
}

impl Segment for MessageWindow {
    fn as_bytes(&self) -> &[u8] {
        // Checked against the buffer when the window was made; the buffer
        // is shared, so never resized since.
        self.buffer
            .as_deref()
            .and_then(|buffer| buffer.get(self.range.clone()))
            .unwrap_or_default()
    }

    fn kind(&self) -> StrategyKind {
        StrategyKind::Bytes
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for MessageWindow {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take().and_then(|b| Arc::try_unwrap(b).ok()) {
            give_back(buffer);
        }
    }
}

/// A message buffer that a dropped [`MessageWindow`] left, largest first;
/// `None` when there is none (or another thread holds the pool: a caller
/// never waits for it).
pub fn take_message_buffer() -> Option<Vec<u8>> {
    let mut pool = try_lock()?;
    let largest = (0..pool.len()).max_by_key(|&i| pool[i].capacity())?;
    Some(pool.swap_remove(largest))
}

/// Keeps `buffer` for a later message, within the pool's bounds; else it
/// is freed.
fn give_back(buffer: Vec<u8>) {
    let Some(mut pool) = try_lock() else {
        return;
    };
    let pooled: usize = pool.iter().map(Vec::capacity).sum();
    if pool.len() < POOL_MAX_BUFFERS
        && pooled.saturating_add(buffer.capacity()) <= POOL_MAX_BYTES
        && pool.try_reserve(1).is_ok()
    {
        pool.push(buffer);
    }
}

fn try_lock() -> Option<MutexGuard<'static, Vec<Vec<u8>>>> {
    match POOL.try_lock() {
        Ok(pool) => Some(pool),
        // The list holds no state a panic could leave half-updated.
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message of `len` bytes, each its index mod 251.
    fn message(len: usize) -> Arc<Vec<u8>> {
        Arc::new((0..len).map(|i| (i % 251) as u8).collect())
    }

    #[test]
    fn a_storage_that_is_most_of_its_message_keeps_it() {
        let message = message(KEEP_MIN_BYTES + 300);
        let range = 200..KEEP_MIN_BYTES + 250;
        let storage = MessageWindow::keep_or_copy(Arc::clone(&message), range.clone()).unwrap();
        assert!(storage.as_any().is::<MessageWindow>());
        assert_eq!(storage.as_bytes(), &message[range.clone()]);
        assert_eq!(storage.as_bytes().as_ptr(), message[range].as_ptr());
        assert_eq!(storage.kind(), StrategyKind::Bytes);
        assert_eq!(Arc::strong_count(&message), 2);
        drop(storage);
        assert_eq!(Arc::strong_count(&message), 1);
    }

    #[test]
    fn small_storages_and_small_parts_of_large_messages_are_copied() {
        let small = message(4096);
        let copied = MessageWindow::keep_or_copy(Arc::clone(&small), 10..4000).unwrap();
        assert!(copied.as_any().is::<BytesSegment>());
        assert_eq!(copied.as_bytes(), &small[10..4000]);
        assert_eq!(Arc::strong_count(&small), 1);

        // Kept, it would hold three times its size.
        let large = message(3 * KEEP_MIN_BYTES);
        let part = 0..KEEP_MIN_BYTES;
        let copied = MessageWindow::keep_or_copy(Arc::clone(&large), part.clone()).unwrap();
        assert!(copied.as_any().is::<BytesSegment>());
        assert_eq!(copied.as_bytes(), &large[part]);
        assert_eq!(Arc::strong_count(&large), 1);
    }

    #[test]
    fn a_range_outside_the_buffer_is_an_error() {
        let message = message(KEEP_MIN_BYTES);
        for range in [
            0..KEEP_MIN_BYTES + 1,
            KEEP_MIN_BYTES + 1..KEEP_MIN_BYTES + 2,
        ] {
            let err = MessageWindow::keep_or_copy(Arc::clone(&message), range).unwrap_err();
            assert!(matches!(err, AllocateError::TooLarge { .. }), "{err}");
        }
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 10..5;
        assert!(MessageWindow::keep_or_copy(message, reversed).is_err());
    }

    #[test]
    fn the_last_window_of_a_message_gives_its_buffer_to_the_next_receive() {
        let message = Arc::new(vec![1u8; 2 * KEEP_MIN_BYTES + 17]);
        let capacity = message.capacity();
        let first =
            MessageWindow::keep_or_copy(Arc::clone(&message), 0..KEEP_MIN_BYTES + 9).unwrap();
        assert!(first.as_any().is::<MessageWindow>());
        let second =
            MessageWindow::keep_or_copy(Arc::clone(&message), 17..2 * KEEP_MIN_BYTES + 17).unwrap();
        drop(message);
        drop(first);
        drop(second);
        // Other tests may have pooled buffers too: this one is among them.
        let mut taken = Vec::new();
        while let Some(buffer) = take_message_buffer() {
            taken.push(buffer.capacity());
        }
        assert!(taken.contains(&capacity), "{taken:?}");
        assert!(taken.windows(2).all(|w| w[0] >= w[1]), "largest first");
    }
}
