//! Read-write `MAP_SHARED` mappings of a file, owned and unmapped on drop.
//!
//! # Safety
//!
//! This module opts in to `unsafe` for six things, each with the check
//! that makes it sound:
//!
//! - `mmap` with no address hint cannot touch existing memory; the kernel
//!   picks a free range or fails. Whether the file covers the mapped range is
//!   the caller's contract ([`SharedMapping::map`],
//!   [`SharedMapping::map_guarded`]): pages past the end of a file fault with
//!   `SIGBUS` when touched.
//! - Registering a mapping of a file that may shrink with the fault guard
//!   ([`crate::fault_guard`]), which then turns such faults into pages of
//!   zeros: the range is a mapping this type owns, registered before the
//!   mapping is returned and unregistered in `Drop` before `munmap`.
//! - Building slices from the mapping: the pointer and length come from a
//!   successful `mmap` and stay valid until `Drop` unmaps them; `&self` hands
//!   out `&[u8]` and `&mut self` a unique `&mut [u8]`, so within this process
//!   Rust's aliasing rules hold. Writes by other processes to the same pages
//!   are outside Rust's memory model, as for memmap2's maps; the crate-level
//!   contract is on [`crate::Segment`].
//! - Splitting a mapping between a shared head and a written tail
//!   ([`SharedMapping::head_atomic_i32`], [`SharedMapping::tail_mut`]): the
//!   `file_system` header's reference count is touched only as an atomic
//!   by every holder, while the one owner of the data writes the bytes after
//!   it; the two never overlap, and `tail_mut`'s contract keeps the tail
//!   uniquely borrowed.
//! - Populating a mapping's pages ([`crate::populate`]): the range is the
//!   whole of one mapping this type owns, borrowed mutably for the call.
//! - `munmap` in `Drop`, exactly once, on the range `mmap` returned.
#![allow(unsafe_code)]

use std::num::NonZeroUsize;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::AtomicI32;
use std::{fmt, slice};

use nix::errno::Errno;
use nix::fcntl::{FallocateFlags, fallocate};
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};
use nix::sys::stat::{FileStat, SFlag};

use crate::ImportError;
use crate::fault_guard::GuardedRange;

/// Whether `stat` describes a regular file, the only kind a strategy maps.
pub(crate) fn is_regular_file(stat: &FileStat) -> bool {
    file_type(stat) == SFlag::S_IFREG
}

/// The file-type bits of `st_mode`.
pub(crate) fn file_type(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits())
}

/// Checks, before mapping, that the file `stat` describes holds `nbytes`
/// after its first `offset` bytes (a header), so no mapped page lies past
/// its end.
///
/// # Errors
///
/// [`ImportError::HandleTooSmall`] with the bytes the file holds after
/// `offset`.
pub(crate) fn check_covers(stat: &FileStat, offset: u64, nbytes: usize) -> Result<(), ImportError> {
    let available = u64::try_from(stat.st_size)
        .unwrap_or(0)
        .saturating_sub(offset);
    if available < nbytes as u64 {
        return Err(ImportError::HandleTooSmall { nbytes, available });
    }
    Ok(())
}

/// A shared, read-write mapping of the start of a file, or an empty one.
pub(crate) struct SharedMapping {
    /// Start of the mapping; dangling (and never dereferenced) when `len == 0`.
    ptr: NonNull<u8>,
    len: usize,
    /// The fault guard's registration, for a file that may shrink while
    /// mapped; dropped (unregistered) before the range is unmapped.
    guard: Option<GuardedRange>,
}

// SAFETY: the mapping is owned memory like a `Box<[u8]>`: nothing in this
// process aliases it except through `&self` / `&mut self`, so moving the owner
// to another thread is sound.
unsafe impl Send for SharedMapping {}
// SAFETY: `&SharedMapping` only gives `&[u8]`, which is `Sync`.
unsafe impl Sync for SharedMapping {}

impl SharedMapping {
    /// A mapping of zero bytes: nothing is mapped, since `mmap` refuses a
    /// zero length.
    const fn empty() -> Self {
        SharedMapping {
            ptr: NonNull::dangling(),
            len: 0,
            guard: None,
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
    ///   the mapped pages (see [`crate::Segment`]).
    ///
    /// # Errors
    ///
    /// The errno of `mmap`: `EACCES` when `fd` is not open read-write,
    /// `ENODEV` when it cannot be mapped, `ENOMEM` when out of address space.
    pub(crate) unsafe fn map(fd: BorrowedFd<'_>, len: usize) -> Result<Self, Errno> {
        let Some(len) = NonZeroUsize::new(len) else {
            return Ok(Self::empty());
        };
        // SAFETY: the file covers `len` bytes and cannot shrink, the
        // caller's contract above.
        unsafe { Self::map_unguarded(fd, len) }
    }

    /// Maps the first `len` bytes of `fd` like [`map`](Self::map), for a
    /// file that another process may shrink while it is mapped: the range is
    /// registered with the fault guard ([`crate::fault_guard`]), so a page
    /// lost to truncation reads as zeros instead of raising `SIGBUS`, and
    /// [`was_truncated`](Self::was_truncated) tells.
    ///
    /// # Safety
    ///
    /// - The file behind `fd` holds at least `len` bytes now.
    /// - The caller documents, for its users, that other processes may write
    ///   the mapped pages (see [`crate::Segment`]) and that bytes lost to a
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
        // SAFETY: the file covers `len` bytes now, the caller's contract; a
        // later truncation is what the guard registered below handles.
        let mut mapping = unsafe { Self::map_unguarded(fd, len) }?;
        // SAFETY: `mapping` owns the page-aligned range `mmap` just returned,
        // and its `Drop` drops the guard before unmapping the range. On an
        // error, `mapping` is dropped unguarded, as it was never handed out.
        let guard = unsafe { GuardedRange::register(mapping.ptr, len) }?;
        mapping.guard = Some(guard);
        Ok(mapping)
    }

    /// Maps the first `len` bytes of `fd`, registering nothing.
    ///
    /// # Safety
    ///
    /// The file behind `fd` holds at least `len` bytes now; the caller
    /// guards against its shrinking later, or rules it out.
    unsafe fn map_unguarded(fd: BorrowedFd<'_>, len: NonZeroUsize) -> Result<Self, Errno> {
        // SAFETY: no address hint, so the kernel places the mapping in a free
        // range and no existing memory is affected; the file's size is the
        // caller's contract above.
        let start = unsafe {
            mmap(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd,
                0,
            )
        }?;
        Ok(SharedMapping {
            ptr: start.cast::<u8>(),
            len: len.get(),
            guard: None,
        })
    }

    /// Allocates and maps every page now, writable, on several threads for
    /// a large mapping (see [`crate::populate`]): running out of memory is
    /// an error here instead of a `SIGBUS` or an out-of-memory kill on a
    /// write later, and a writer then takes no page faults.
    ///
    /// # Errors
    ///
    /// `EINVAL` on kernels before 5.14, which lack the call; `ENOMEM` or
    /// `ENOSPC` when the pages cannot be had (a write would have raised
    /// `SIGBUS`).
    fn populate_writable(&mut self) -> Result<(), Errno> {
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: `ptr` and `len` are this mapping's whole range, from one
        // successful shared, writable `mmap`; `&mut self` keeps the range
        // ours for the call.
        let result = unsafe { crate::populate::populate_writable(self.ptr, self.len) };
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

    /// Whether a page of this mapping was lost to the file shrinking and
    /// replaced with zeros by the fault guard; always `false` for a mapping
    /// made with [`map`](Self::map).
    pub(crate) fn was_truncated(&self) -> bool {
        self.guard.as_ref().is_some_and(GuardedRange::was_truncated)
    }

    /// The mapped bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is either the start of a live mapping of `len`
        // readable bytes, unmapped only in `Drop`, or dangling with `len == 0`,
        // which `from_raw_parts` allows (u8 needs no alignment). `len` came
        // from a `NonZeroUsize` no larger than `MAX_SEGMENT_BYTES`
        // (isize::MAX), as callers check before mapping.
        unsafe { slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The mapped bytes, writable.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and the mapping is writable (PROT_WRITE);
        // `&mut self` guarantees no other reference into it exists in this
        // process.
        unsafe { slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The mapping's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
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
        let Some(len) = self.len.checked_sub(offset) else {
            return &mut [];
        };
        // SAFETY: `offset <= self.len`, so `ptr + offset` stays within (or one
        // past the end of) the live, writable mapping and `len` bytes follow
        // it; the caller guarantees these bytes are not otherwise borrowed.
        unsafe { slice::from_raw_parts_mut(self.ptr.as_ptr().add(offset), len) }
    }

    /// The first four bytes as an atomic `i32`: the reference count several
    /// processes update in place. `None` for a mapping shorter than that.
    ///
    /// Callers must not also borrow those four bytes as `u8`s.
    pub(crate) fn head_atomic_i32(&self) -> Option<&AtomicI32> {
        if self.len < size_of::<AtomicI32>() {
            return None;
        }
        // SAFETY: the mapping is page aligned and at least four bytes long,
        // so the pointer is valid and aligned for `AtomicI32`, which has the
        // size and layout of `i32`; any bit pattern is a valid `i32`. Other
        // processes update these bytes with atomic instructions only (torch's
        // `std::atomic<int>`), the use `AtomicI32` documents for shared memory.
        Some(unsafe { AtomicI32::from_ptr(self.ptr.as_ptr().cast::<i32>()) })
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
        if self.len == 0 {
            return;
        }
        // Unregistered first, so that the fault guard never patches a later,
        // unrelated mapping at this address.
        drop(self.guard.take());
        // SAFETY: `ptr` and `len` are exactly what a successful `mmap`
        // returned, and this is the only place that unmaps them; no slice
        // borrowed from `self` can outlive this call.
        unsafe { unmap_owned(self.ptr.cast(), self.len) };
    }
}

/// Unmaps a range from `drop`, where there is nobody to report to.
///
/// `munmap` only fails for a range that is not page aligned or not mapped,
/// neither of which can happen to a range `mmap` gave; panicking would
/// abort an unwinding thread, so the error is ignored, as memmap2 does.
///
/// # Safety
///
/// `ptr` and `len` are exactly what one successful `mmap` returned, the
/// caller is the range's only owner and unmaps it once, and nothing
/// borrowed from it outlives the call.
pub(crate) unsafe fn unmap_owned(ptr: NonNull<std::ffi::c_void>, len: usize) {
    // SAFETY: the caller's contract.
    let _ = unsafe { munmap(ptr, len) };
}

impl fmt::Debug for SharedMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedMapping")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("guard", &self.guard)
            .finish()
    }
}
