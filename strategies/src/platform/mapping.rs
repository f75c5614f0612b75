//! Read-write `MAP_SHARED` mappings of a file, owned and unmapped on drop.
//!
//! memmap2 maps, advises and unmaps ([`MmapRaw`]). A [`SharedMapping`]
//! adds what memmap2 leaves to its user:
//!
//! - The fault guard ([`fault_guard`](super::fault_guard)): a file that
//!   another process may shrink while it is mapped here is registered with
//!   it, so a page lost to truncation reads as zeros instead of raising
//!   `SIGBUS`. memmap2 has no such thing; it needs a `SIGBUS` handler and
//!   `MAP_FIXED`, which stay hand-written there.
//! - Slices over the mapping, and a head shared with other processes (the
//!   `file_system` reference count, an atomic) beside a tail one owner
//!   writes. memmap2's `MmapMut` would hand out the whole mapping as one
//!   `&mut [u8]`, which cannot coexist with the shared head; [`MmapRaw`]
//!   hands out raw pointers, and the slices and the atomic are made here.
//! - Populating every page before a writer touches one
//!   ([`populate`](super::populate), memmap2's advice on several threads).
//!
//! # Safety
//!
//! This module opts in to `unsafe` for three things, each with the check
//! that makes it sound:
//!
//! - Registering a mapping of a file that may shrink with the fault guard,
//!   which then turns such faults into pages of zeros: the range is a
//!   mapping this type owns, registered before the mapping is returned and
//!   unregistered in `Drop` before memmap2 unmaps it.
//! - Building slices from the mapping: the pointer and length come from
//!   memmap2's successful `mmap` and stay valid until the [`MmapRaw`] is
//!   dropped with the mapping; `&self` hands out `&[u8]` and `&mut self` a
//!   unique `&mut [u8]`, so within this process Rust's aliasing rules hold.
//!   Writes by other processes to the same pages are outside Rust's memory
//!   model, as for memmap2's maps; the contract is on the constructors
//!   ([`SharedMapping::map`], [`SharedMapping::map_guarded`]), whose callers
//!   pass it on to their users. Whether the file covers the mapped range is
//!   the callers' contract too: pages past the end of a file fault with
//!   `SIGBUS` when touched.
//! - Splitting a mapping between a shared head and a written tail
//!   ([`SharedMapping::head_atomic_i32`], [`SharedMapping::tail_mut`]): the
//!   `file_system` header's reference count is touched only as an atomic
//!   by every holder, while the one owner of the data writes the bytes after
//!   it; the two never overlap, and `tail_mut`'s contract keeps the tail
//!   uniquely borrowed.
#![allow(unsafe_code)]

use std::num::NonZeroUsize;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::AtomicI32;
use std::{fmt, slice};

use memmap2::{MmapOptions, MmapRaw};
use nix::errno::Errno;
use nix::fcntl::{FallocateFlags, fallocate};
use nix::sys::stat::{FileStat, SFlag};

use super::errno_of;
use super::fault_guard::GuardedRange;

/// Whether `stat` describes a regular file, the only kind a strategy maps.
pub(crate) fn is_regular_file(stat: &FileStat) -> bool {
    file_type(stat) == SFlag::S_IFREG
}

/// The file-type bits of `st_mode`.
pub(crate) fn file_type(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits())
}

/// A shared, read-write mapping of the start of a file, or an empty one.
pub(crate) struct SharedMapping {
    /// The fault guard's registration, for a file that may shrink while
    /// mapped; dropped (unregistered) in `Drop`, before `map` unmaps the
    /// range.
    guard: Option<GuardedRange>,
    /// The mapping; `None` for zero bytes, since `mmap` refuses a zero
    /// length.
    map: Option<MmapRaw>,
}

impl SharedMapping {
    /// A mapping of zero bytes: nothing is mapped.
    const fn empty() -> Self {
        SharedMapping {
            guard: None,
            map: None,
        }
    }

    /// Maps the first `len` bytes of `fd` with `MAP_SHARED`, readable and
    /// writable, for a file that cannot shrink; maps nothing when `len` is 0.
    ///
    /// # Safety
    ///
    /// - The file behind `fd` holds at least `len` bytes and cannot shrink
    ///   while mapped: it is sealed with `F_SEAL_SHRINK`. A file that may
    ///   shrink is mapped with [`map_guarded`](Self::map_guarded).
    /// - The caller documents, for its users, that other processes may write
    ///   the mapped pages (the crate's `Segment` docs say so).
    ///
    /// # Errors
    ///
    /// The errno of `mmap`: `EACCES` when `fd` is not open read-write,
    /// `ENODEV` when it cannot be mapped, `ENOMEM` when out of address space.
    pub(crate) unsafe fn map(fd: BorrowedFd<'_>, len: usize) -> Result<Self, Errno> {
        let Some(len) = NonZeroUsize::new(len) else {
            return Ok(Self::empty());
        };
        // The file covers `len` bytes and cannot shrink, the caller's
        // contract above, which the slices handed out rely on.
        Self::map_unguarded(fd, len)
    }

    /// Maps the first `len` bytes of `fd` like [`map`](Self::map), for a
    /// file that another process may shrink while it is mapped: the range is
    /// registered with the fault guard ([`fault_guard`](super::fault_guard)), so a
    /// page lost to truncation reads as zeros instead of raising `SIGBUS`, and
    /// [`was_truncated`](Self::was_truncated) tells.
    ///
    /// # Safety
    ///
    /// - The file behind `fd` holds at least `len` bytes now.
    /// - The caller documents, for its users, that other processes may write
    ///   the mapped pages (the crate's `Segment` docs say so) and that bytes lost to a
    ///   truncation read as zeros.
    ///
    /// # Errors
    ///
    /// As [`map`](Self::map); also `ENOMEM` when the fault guard holds too
    /// many ranges, or the errno of installing its `SIGBUS` handler.
    pub(crate) unsafe fn map_guarded(fd: BorrowedFd<'_>, len: usize) -> Result<Self, Errno> {
        let Some(len) = NonZeroUsize::new(len) else {
            return Ok(Self::empty());
        };
        // The file covers `len` bytes now, the caller's contract; a later
        // truncation is what the guard registered below handles.
        let mut mapping = Self::map_unguarded(fd, len)?;
        // SAFETY: `mapping` owns the page-aligned range memmap2 just mapped,
        // and its `Drop` drops the guard before the range is unmapped. On an
        // error, `mapping` is dropped unguarded, as it was never handed out.
        let guard = unsafe { GuardedRange::register(mapping.start(), len) }?;
        mapping.guard = Some(guard);
        Ok(mapping)
    }

    /// Maps the first `len` bytes of `fd`, registering nothing. Mapping
    /// alone touches no page: what makes the slices handed out later sound
    /// is the contract of [`map`](Self::map) and
    /// [`map_guarded`](Self::map_guarded).
    fn map_unguarded(fd: BorrowedFd<'_>, len: NonZeroUsize) -> Result<Self, Errno> {
        // memmap2 maps with no address hint, so the kernel places the
        // mapping in a free range and no existing memory is affected; it
        // maps readable and writable, `MAP_SHARED`, from offset 0.
        let map = MmapOptions::new()
            .len(len.get())
            .map_raw(&fd)
            .map_err(|error| errno_of(&error))?;
        Ok(SharedMapping {
            guard: None,
            map: Some(map),
        })
    }

    /// Allocates and maps every page now, writable, on several threads for
    /// a large mapping (see [`populate`](super::populate)): running out of
    /// memory is an error here instead of a `SIGBUS` or an out-of-memory
    /// kill on a write later, and a writer then takes no page faults.
    ///
    /// # Errors
    ///
    /// `EINVAL` on kernels before 5.14, which lack the call; `ENOMEM` or
    /// `ENOSPC` when the pages cannot be had (a write would have raised
    /// `SIGBUS`).
    fn populate_writable(&mut self) -> Result<(), Errno> {
        let Some(map) = &self.map else {
            return Ok(());
        };
        let result = super::populate::populate_writable(map);
        // The kernel's word for "a write here would raise SIGBUS": the
        // filesystem or the commit limit has no room for the page.
        result.map_err(|errno| {
            if errno == Errno::EFAULT {
                Errno::ENOSPC
            } else {
                errno
            }
        })
    }

    /// The start of the mapping; dangling (and never dereferenced) when it
    /// is empty.
    fn start(&self) -> NonNull<u8> {
        self.map
            .as_ref()
            .and_then(|map| NonNull::new(map.as_mut_ptr()))
            .unwrap_or(NonNull::dangling())
    }

    /// Whether a page of this mapping was lost to the file shrinking and
    /// replaced with zeros by the fault guard; always `false` for a mapping
    /// made with [`map`](Self::map).
    pub(crate) fn was_truncated(&self) -> bool {
        self.guard.as_ref().is_some_and(GuardedRange::was_truncated)
    }

    /// The mapped bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `start` is either the start of a live mapping of `len`
        // readable bytes, unmapped only when `self.map` is dropped, or
        // dangling with `len == 0`, which `from_raw_parts` allows (u8 needs
        // no alignment). `len` came from a `NonZeroUsize` no larger than
        // `MAX_SEGMENT_BYTES` (isize::MAX), as callers check before mapping.
        unsafe { slice::from_raw_parts(self.start().as_ptr(), self.len()) }
    }

    /// The mapped bytes, writable.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and the mapping is writable (memmap2's
        // `map_raw` maps with PROT_WRITE); `&mut self` guarantees no other
        // reference into it exists in this process.
        unsafe { slice::from_raw_parts_mut(self.start().as_ptr(), self.len()) }
    }

    /// The mapping's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.map.as_ref().map_or(0, MmapRaw::len)
    }

    /// The mapped bytes from `offset` on (empty when `offset` is past the end).
    pub(crate) fn tail(&self, offset: usize) -> &[u8] {
        self.as_slice().get(offset..).unwrap_or_default()
    }

    /// The mapped bytes from `offset` on, writable, through a shared
    /// reference: for mappings whose head is shared with other owners (a
    /// reference-count header) while one owner writes the rest.
    ///
    /// # Safety
    ///
    /// For as long as the returned slice lives, no other reference to any
    /// byte at or after `offset` exists in this process: not from another
    /// `tail_mut` or [`tail`](Self::tail) call, nor from
    /// [`as_slice`](Self::as_slice) / [`as_mut_slice`](Self::as_mut_slice).
    // `&self` because the head stays shared with other owners while the tail
    // is written; the Safety contract keeps the tail uniquely borrowed.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn tail_mut(&self, offset: usize) -> &mut [u8] {
        let Some(len) = self.len().checked_sub(offset) else {
            return &mut [];
        };
        // SAFETY: `offset <= self.len`, so `ptr + offset` stays within (or one
        // past the end of) the live, writable mapping and `len` bytes follow
        // it; the caller guarantees these bytes are not otherwise borrowed.
        unsafe { slice::from_raw_parts_mut(self.start().as_ptr().add(offset), len) }
    }

    /// The first four bytes as an atomic `i32`: the reference count several
    /// processes update in place. `None` for a mapping shorter than that.
    ///
    /// # Safety
    ///
    /// While the returned reference lives, the caller must not borrow those
    /// four bytes otherwise (as `u8`s through [`tail`](Self::tail) or
    /// [`tail_mut`](Self::tail_mut) from offset 0): a plain read racing
    /// with the atomic writes of this or another process is a data race.
    pub(crate) unsafe fn head_atomic_i32(&self) -> Option<&AtomicI32> {
        if self.len() < size_of::<AtomicI32>() {
            return None;
        }
        // SAFETY: the mapping is page aligned and at least four bytes long,
        // so the pointer is valid and aligned for `AtomicI32`, which has the
        // size and layout of `i32`; any bit pattern is a valid `i32`. Other
        // processes update these bytes with atomic instructions only (torch's
        // `std::atomic<int>`), the use `AtomicI32` documents for shared memory.
        Some(unsafe { AtomicI32::from_ptr(self.start().as_ptr().cast::<i32>()) })
    }
}

/// Has every page of a new memfd's `mapping` of `fd` (`len` bytes)
/// allocated and mapped before its writer touches one: populated
/// ([`SharedMapping::populate_writable`]), or on kernels before 5.14
/// reserved ([`reserve`]).
///
/// Only for objects limited by memory alone. On a filesystem of fixed size
/// (`/dev/shm`) populating a segment larger than the free space would fill
/// it, for every process using it, before failing, where `fallocate`
/// refuses at once; and with the pages reserved, populating them costs
/// more than the writer's faults.
///
/// # Errors
///
/// `ENOMEM` or `ENOSPC` when the pages cannot be had; on older kernels,
/// what `fallocate` fails with.
pub(crate) fn provision(
    mapping: &mut SharedMapping,
    fd: BorrowedFd<'_>,
    len: i64,
) -> Result<(), Errno> {
    match mapping.populate_writable() {
        Err(Errno::EINVAL) => reserve(fd, len),
        other => other,
    }
}

/// Allocates the pages of the first `len` bytes of `fd` now, so that running
/// out of memory is an error here rather than a `SIGBUS` on first write.
///
/// Filesystems that cannot reserve (`EOPNOTSUPP`) are left as they are: the
/// pages are then allocated on first write, as without this call.
pub(crate) fn reserve(fd: BorrowedFd<'_>, len: i64) -> Result<(), Errno> {
    if len == 0 {
        return Ok(());
    }
    loop {
        match fallocate(fd, FallocateFlags::empty(), 0, len) {
            Err(Errno::EINTR) => continue,
            Err(Errno::EOPNOTSUPP) => return Ok(()),
            other => return other,
        }
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // Unregistered first, so that the fault guard never patches a later,
        // unrelated mapping at this address; memmap2 unmaps the range when
        // `self.map` is dropped after this, ignoring a failed `munmap` (which
        // only a range `mmap` did not give could cause).
        drop(self.guard.take());
    }
}

impl fmt::Debug for SharedMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedMapping")
            .field("ptr", &self.start())
            .field("len", &self.len())
            .field("guard", &self.guard)
            .finish()
    }
}
