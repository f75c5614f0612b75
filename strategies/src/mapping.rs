//! Read-write `MAP_SHARED` mappings of a file, owned and unmapped on drop.
//!
//! # Safety
//!
//! This module opts in to `unsafe` for three things, each with the check
//! that makes it sound:
//!
//! - `mmap` with no address hint cannot touch existing memory; the kernel
//!   picks a free range or fails. Whether the file covers the mapped range is
//!   the caller's contract ([`SharedMapping::map`]): pages past the end of a
//!   file fault with `SIGBUS` when touched.
//! - Building slices from the mapping: the pointer and length come from a
//!   successful `mmap` and stay valid until `Drop` unmaps them; `&self` hands
//!   out `&[u8]` and `&mut self` a unique `&mut [u8]`, so within this process
//!   Rust's aliasing rules hold. Writes by other processes to the same pages
//!   are outside Rust's memory model, as for memmap2's maps; the crate-level
//!   contract is on [`crate::Segment`].
//! - `munmap` in `Drop`, exactly once, on the range `mmap` returned.
#![allow(unsafe_code)]

use std::num::NonZeroUsize;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::{fmt, slice};

use nix::errno::Errno;
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};

/// A shared, read-write mapping of the start of a file, or an empty one.
pub(crate) struct SharedMapping {
    /// Start of the mapping; dangling (and never dereferenced) when `len == 0`.
    ptr: NonNull<u8>,
    len: usize,
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
    pub(crate) const fn empty() -> Self {
        SharedMapping {
            ptr: NonNull::dangling(),
            len: 0,
        }
    }

    /// Maps the first `len` bytes of `fd` with `MAP_SHARED`, readable and
    /// writable.
    ///
    /// # Safety
    ///
    /// - The file behind `fd` holds at least `len` bytes, and cannot shrink
    ///   while mapped (sealed with `F_SEAL_SHRINK`), or the caller accepts
    ///   that whoever shrinks it makes this process fault with `SIGBUS` on the
    ///   lost pages.
    /// - The caller documents, for its users, that other processes may write
    ///   the mapped pages (see [`crate::Segment`]).
    ///
    /// # Errors
    ///
    /// The errno of `mmap`: `EACCES` when `fd` is not open read-write,
    /// `ENODEV` when it cannot be mapped, `ENOMEM` when out of address space.
    pub(crate) unsafe fn map(fd: BorrowedFd<'_>, len: NonZeroUsize) -> Result<Self, Errno> {
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
        })
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
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        // SAFETY: `ptr` and `len` are exactly what a successful `mmap`
        // returned, and this is the only place that unmaps them; no slice
        // borrowed from `self` can outlive this call.
        let result = unsafe { munmap(self.ptr.cast(), self.len) };
        // munmap only fails for a range that is not page aligned or not
        // mapped, neither of which can happen here; there is nobody to report
        // to in `drop`, and panicking would abort an unwinding thread, so the
        // error is ignored as memmap2 does.
        let _ = result;
    }
}

impl fmt::Debug for SharedMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedMapping")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}
