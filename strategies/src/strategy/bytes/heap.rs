//! Heap buffers that keep their pages between messages.
//!
//! A streaming workload allocates a large storage per message and drops it
//! soon after. glibc serves every allocation above its mmap threshold with a
//! fresh `mmap` and gives it back with `munmap` on free; the threshold adapts
//! upwards but never past 32 MiB (on 64-bit), so a 64 MiB buffer is mapped
//! afresh every time and every message pays the page faults of first touch
//! again: on a VM about 40-50 ms for 64 MiB in 4 KiB pages, 15-25 ms in
//! transparent huge pages, against 5-8 ms to rewrite memory already faulted
//! in.
//!
//! [`HeapBuffer`] does what a caching allocator does:
//!
//! - Below 1 MiB a buffer is a plain `Vec<u8>`; faults do not matter there.
//! - From 1 MiB on it is a private anonymous mapping whose length is rounded
//!   up to a multiple of 2 MiB (which also lets the kernel align it to a huge
//!   page), advised `MADV_HUGEPAGE` so that it faults in huge pages where
//!   transparent huge pages are in `madvise` mode.
//! - Dropping such a buffer gives its mapping to a process-wide pool; the
//!   next buffer of the same rounded length takes it back, already faulted
//!   in. The pool keeps at most 512 MiB of mappings (so at most 256);
//!   past that the least recently returned mapping is unmapped.
//! - A pooled mapping is advised `MADV_FREE`: under memory pressure the
//!   kernel may take its pages back (a later write faults in zeros) instead
//!   of swapping them, so pooled memory goes back to the system when it
//!   needs it. Until then the pages still count in the process's RSS. On huge pages the
//!   advice costs about 0.04 ms for 64 MiB and leaves the rewrite as fast as
//!   without it; on 4 KiB pages (no huge page was available) the rewrite
//!   after it takes about 2.5 times as long, still half the cost of fresh
//!   pages.
//!
//! # Safety
//!
//! memmap2 maps, advises and unmaps the anonymous memory, and hands out its
//! bytes as slices ([`MmapMut`](https://docs.rs/memmap2/0.9/memmap2/struct.MmapMut.html)). This module opts in to `unsafe` for one
//! advice alone, `MADV_FREE`, which may replace the contents of the pages
//! with zeros later: it is given only to a mapping entering the pool,
//! which nothing borrows, and a buffer built from a pooled mapping writes
//! every byte it exposes before handing it out ([`HeapBuffer::zeroed`]
//! with a memset, [`HeapBuffer::copy_of`] with the copy). A written page is
//! dirty, and the kernel never discards a dirty page, so the exposed bytes
//! only change through the buffer. The pool takes a mapping by value and
//! gives it out by value (moving it out of its list), so a range never has
//! two owners.
//!
//! The pool never waits for its lock: a buffer allocated or dropped while
//! another thread holds it simply bypasses the pool (a fresh mapping, or an
//! unmapping). A child forked while a thread held the lock therefore never
//! deadlocks on it; it gets its own copy-on-write copy of every pooled
//! mapping together with its copy of the list. A lock poisoned by a panic
//! is taken over as is, since the list holds no state a panic could leave
//! half-updated.
#![allow(unsafe_code)]

use std::fmt;
use std::num::NonZeroUsize;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard, TryLockError};

use memmap2::{Advice, MmapMut, MmapOptions, UncheckedAdvice};
use nix::errno::Errno;

use crate::platform::errno_of;
use crate::strategy::error::MAX_SEGMENT_BYTES;
use crate::{AllocateError, Exhausted};

/// Buffers of at least this many bytes are mappings; smaller ones are `Vec`s.
const MAPPED_MIN_BYTES: usize = 1 << 20;

/// Mapping lengths are multiples of this: the huge page size of x86-64 and
/// of arm64 with 4 KiB pages.
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// The most mappings the process-wide pool keeps: as many as its byte
/// bound holds, so that a producer keeping a window of 1 MiB storages in
/// flight (each a 2 MiB mapping) gets every one of them back. With 8, a
/// window of 64 faulted 56 fresh huge pages in per round, and a round
/// took up to 5 times as long.
const POOL_MAX_BUFFERS: usize = POOL_MAX_BYTES / HUGE_PAGE_BYTES;

/// The most bytes (of mapping lengths) the process-wide pool keeps.
const POOL_MAX_BYTES: usize = 512 << 20;

/// The pool every [`HeapBuffer`] returns its mapping to.
static POOL: HeapPool = HeapPool::new(POOL_MAX_BUFFERS, POOL_MAX_BYTES);

/// A byte buffer in this process's memory: a `Vec<u8>` when small, a
/// private anonymous mapping recycled through a process-wide pool from
/// 1 MiB on (see the [module docs](self)).
///
/// # Examples
///
/// ```
/// use tensorshare_strategies::bytes::heap::HeapBuffer;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut buffer = HeapBuffer::zeroed(4 << 20)?;
/// assert!(buffer.iter().all(|&byte| byte == 0));
/// buffer[0] = 7;
///
/// let copy = HeapBuffer::copy_of(&buffer)?;
/// assert_eq!(copy, buffer);
/// # Ok(())
/// # }
/// ```
pub struct HeapBuffer {
    storage: Storage,
}

/// Where a [`HeapBuffer`]'s bytes live.
enum Storage {
    /// Small buffers and buffers adopted with [`HeapBuffer::from_vec`].
    Vec(Vec<u8>),
    /// Large buffers: the first `len` bytes of `mapping`, which goes back to
    /// `pool` on drop.
    Mapped {
        mapping: AnonymousMapping,
        len: usize,
        pool: &'static HeapPool,
    },
}

impl HeapBuffer {
    /// A buffer of `nbytes` zero bytes.
    ///
    /// From 1 MiB on, a pooled mapping of the same rounded length is reused
    /// and cleared with a memset; a fresh mapping is zero already.
    ///
    /// # Errors
    ///
    /// [`AllocateError::TooLarge`] above [`MAX_SEGMENT_BYTES`];
    /// [`AllocateError::Exhausted`] (memory) when the allocator or `mmap` refuses.
    /// Never aborts the process the way `vec![0; nbytes]` does.
    pub fn zeroed(nbytes: usize) -> Result<HeapBuffer, AllocateError> {
        Self::zeroed_in(&POOL, nbytes)
    }

    /// A buffer holding a copy of `bytes`, copied once: from 1 MiB on into a
    /// pooled mapping of the same rounded length (not cleared first) or a
    /// fresh one.
    ///
    /// # Errors
    ///
    /// [`AllocateError::Exhausted`] (memory) when the allocator or `mmap` refuses.
    pub fn copy_of(bytes: &[u8]) -> Result<HeapBuffer, AllocateError> {
        Self::copy_of_in(&POOL, bytes)
    }

    /// Adopts `bytes` without copying. The buffer stays a `Vec`, whatever
    /// its size, and is freed by the global allocator on drop.
    pub fn from_vec(bytes: Vec<u8>) -> HeapBuffer {
        HeapBuffer {
            storage: Storage::Vec(bytes),
        }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.storage {
            Storage::Vec(bytes) => bytes,
            Storage::Mapped { mapping, len, .. } => &mapping.as_slice()[..*len],
        }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.storage {
            Storage::Vec(bytes) => bytes,
            Storage::Mapped { mapping, len, .. } => &mut mapping.as_mut_slice()[..*len],
        }
    }

    /// The number of bytes.
    pub fn len(&self) -> usize {
        match &self.storage {
            Storage::Vec(bytes) => bytes.len(),
            Storage::Mapped { len, .. } => *len,
        }
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// [`zeroed`](Self::zeroed), recycling through `pool`.
    fn zeroed_in(pool: &'static HeapPool, nbytes: usize) -> Result<HeapBuffer, AllocateError> {
        let Some(mapped_len) = mapping_len_for(nbytes)? else {
            let mut bytes = reserve_vec(nbytes)?;
            // Within the reserved capacity: no reallocation.
            bytes.resize(nbytes, 0);
            return Ok(Self::from_vec(bytes));
        };
        if let Some(mapping) = pool.take(mapped_len) {
            let mut buffer = Self::mapped(mapping, nbytes, pool);
            // Writes every exposed byte, as the module's Safety section
            // requires of a pooled mapping.
            buffer.as_mut_slice().fill(0);
            return Ok(buffer);
        }
        let mapping =
            AnonymousMapping::new(mapped_len).map_err(|errno| out_of_memory(nbytes, errno))?;
        // A fresh anonymous mapping reads as zeros.
        Ok(Self::mapped(mapping, nbytes, pool))
    }

    /// [`copy_of`](Self::copy_of), recycling through `pool`.
    fn copy_of_in(pool: &'static HeapPool, bytes: &[u8]) -> Result<HeapBuffer, AllocateError> {
        let nbytes = bytes.len();
        let Some(mapped_len) = mapping_len_for(nbytes)? else {
            let mut copy = reserve_vec(nbytes)?;
            copy.extend_from_slice(bytes);
            return Ok(Self::from_vec(copy));
        };
        let mapping = match pool.take(mapped_len) {
            Some(mapping) => mapping,
            None => {
                AnonymousMapping::new(mapped_len).map_err(|errno| out_of_memory(nbytes, errno))?
            }
        };
        let mut buffer = Self::mapped(mapping, nbytes, pool);
        // Writes every exposed byte, as the module's Safety section requires
        // of a pooled mapping.
        buffer.as_mut_slice().copy_from_slice(bytes);
        Ok(buffer)
    }

    /// The first `len` bytes of `mapping`, returned to `pool` on drop.
    fn mapped(mapping: AnonymousMapping, len: usize, pool: &'static HeapPool) -> HeapBuffer {
        debug_assert!(len <= mapping.len.get());
        HeapBuffer {
            storage: Storage::Mapped { mapping, len, pool },
        }
    }

    /// The length of the mapping behind the buffer; `None` for a `Vec`.
    fn mapped_len(&self) -> Option<usize> {
        match &self.storage {
            Storage::Vec(_) => None,
            Storage::Mapped { mapping, .. } => Some(mapping.len.get()),
        }
    }
}

/// The mapping length for a buffer of `nbytes`, `None` for a buffer small
/// enough to be a `Vec`.
fn mapping_len_for(nbytes: usize) -> Result<Option<NonZeroUsize>, AllocateError> {
    if nbytes > MAX_SEGMENT_BYTES {
        return Err(AllocateError::TooLarge { nbytes });
    }
    if nbytes < MAPPED_MIN_BYTES {
        return Ok(None);
    }
    nbytes
        .checked_next_multiple_of(HUGE_PAGE_BYTES)
        .and_then(NonZeroUsize::new)
        .map(Some)
        .ok_or_else(|| out_of_memory(nbytes, Errno::ENOMEM))
}

/// An empty `Vec` with room for exactly `nbytes`, or an error when the
/// allocator refuses.
fn reserve_vec(nbytes: usize) -> Result<Vec<u8>, AllocateError> {
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(nbytes)
        .map_err(|_| out_of_memory(nbytes, Errno::ENOMEM))?;
    Ok(bytes)
}

fn out_of_memory(nbytes: usize, errno: Errno) -> AllocateError {
    AllocateError::Exhausted {
        nbytes,
        limit: Exhausted::Memory(errno),
    }
}

impl Drop for HeapBuffer {
    fn drop(&mut self) {
        let storage = std::mem::replace(&mut self.storage, Storage::Vec(Vec::new()));
        if let Storage::Mapped { mapping, pool, .. } = storage {
            pool.give_back(mapping);
        }
    }
}

impl Deref for HeapBuffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl DerefMut for HeapBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl Default for HeapBuffer {
    /// An empty buffer; allocates nothing.
    fn default() -> Self {
        Self::from_vec(Vec::new())
    }
}

impl Clone for HeapBuffer {
    /// A [`copy_of`](Self::copy_of) the bytes; when that fails, a `Vec`
    /// copy, which aborts on out of memory as `Vec::clone` does.
    fn clone(&self) -> Self {
        Self::copy_of(self).unwrap_or_else(|_| Self::from_vec(self.to_vec()))
    }
}

impl PartialEq for HeapBuffer {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for HeapBuffer {}

impl fmt::Debug for HeapBuffer {
    /// The length and where the bytes live, not the bytes themselves.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeapBuffer")
            .field("len", &self.len())
            .field("mapped_len", &self.mapped_len())
            .finish()
    }
}

/// A private, read-write anonymous mapping, owned and unmapped on drop.
struct AnonymousMapping {
    map: MmapMut,
    len: NonZeroUsize,
}

impl AnonymousMapping {
    /// Maps `len` bytes of zeros, advised to fault in huge pages.
    fn new(len: NonZeroUsize) -> Result<AnonymousMapping, Errno> {
        // memmap2 maps with no address hint, `MAP_PRIVATE | MAP_ANONYMOUS`,
        // readable and writable.
        let map = MmapOptions::new()
            .len(len.get())
            .map_anon()
            .map_err(|error| errno_of(&error))?;
        // Only an optimisation: kernels without transparent huge pages refuse
        // it (EINVAL), and the mapping works the same without.
        let _ = map.advise(Advice::HugePage);
        Ok(AnonymousMapping { map, len })
    }

    /// Lets the kernel reclaim the pages instead of swapping them; until it
    /// does, they keep their contents, and a write keeps the written page.
    ///
    /// Called on a mapping entering the pool; see the module's Safety
    /// section for why its bytes are written before they are read again.
    fn advise_free(&mut self) {
        // SAFETY: the range is this mapping, owned here and borrowed by
        // nothing (`&mut self`). MADV_FREE may later turn its bytes into
        // zeros, which are valid `u8`s; the buffers built from a pooled
        // mapping overwrite every byte they expose first.
        let advice = unsafe { self.map.unchecked_advise(UncheckedAdvice::Free) };
        // Only an optimisation: kernels before 4.5 refuse it (EINVAL), and
        // the pages then stay resident while pooled, bounded by the pool.
        let _ = advice;
    }

    fn as_slice(&self) -> &[u8] {
        &self.map
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.map
    }
}

impl fmt::Debug for AnonymousMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnonymousMapping")
            .field("ptr", &self.map.as_ptr())
            .field("len", &self.len)
            .finish()
    }
}

/// Mappings given back by dropped [`HeapBuffer`]s, kept for reuse within
/// bounds.
struct HeapPool {
    max_buffers: usize,
    max_bytes: usize,
    /// The pooled mappings, least recently returned first.
    free: Mutex<Vec<AnonymousMapping>>,
}

impl HeapPool {
    /// An empty pool keeping at most `max_buffers` mappings and
    /// `max_bytes` bytes of mapping length.
    const fn new(max_buffers: usize, max_bytes: usize) -> HeapPool {
        HeapPool {
            max_buffers,
            max_bytes,
            free: Mutex::new(Vec::new()),
        }
    }

    /// The list, even if a thread panicked while holding it (every entry is
    /// a whole, owned mapping at all times, so there is nothing to repair);
    /// `None` while another thread holds it, or a thread of the parent
    /// process held it at `fork`.
    fn try_lock(&self) -> Option<MutexGuard<'_, Vec<AnonymousMapping>>> {
        match self.free.try_lock() {
            Ok(free) => Some(free),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// The most recently returned mapping of exactly `len` bytes, removed
    /// from the pool.
    fn take(&self, len: NonZeroUsize) -> Option<AnonymousMapping> {
        let mut free = self.try_lock()?;
        let index = free.iter().rposition(|mapping| mapping.len == len)?;
        Some(free.remove(index))
    }

    /// Keeps `mapping` for reuse, unmapping the least recently returned
    /// ones as needed to stay within the bounds; unmaps `mapping` itself
    /// when it alone exceeds them. Unmapping happens outside the lock.
    fn give_back(&self, mut mapping: AnonymousMapping) {
        let len = mapping.len.get();
        if self.max_buffers == 0 || len > self.max_bytes {
            return;
        }
        mapping.advise_free();
        loop {
            let evicted = {
                let Some(mut free) = self.try_lock() else {
                    return;
                };
                let pooled: usize = free.iter().map(|pooled| pooled.len.get()).sum();
                if free.len() < self.max_buffers && pooled + len <= self.max_bytes {
                    // Without room for the entry, `mapping` is unmapped
                    // rather than aborting the process on a failed push.
                    if free.try_reserve(1).is_ok() {
                        free.push(mapping);
                    }
                    return;
                }
                free.remove(0)
            };
            drop(evicted);
        }
    }

    /// The list, waiting for it: for tests that look inside.
    #[cfg(test)]
    fn lock(&self) -> MutexGuard<'_, Vec<AnonymousMapping>> {
        self.free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many mappings and bytes the pool holds.
    #[cfg(test)]
    fn usage(&self) -> (usize, usize) {
        let free = self.lock();
        let bytes = free.iter().map(|mapping| mapping.len.get()).sum();
        (free.len(), bytes)
    }
}

#[cfg(test)]
mod tests;
