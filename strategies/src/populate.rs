//! Allocating and mapping every page of a fresh segment before its writer
//! touches one, on several threads for large segments.
//!
//! A writer filling a shared mapping takes one page fault per page, and
//! with transparent huge pages off for shared memory (the usual setting)
//! that is a fault every 4 KiB: at 64 MiB the faults, not the writing, are
//! most of the cost. `MADV_POPULATE_WRITE` (Linux 5.14) does the same work
//! in the kernel without a fault per page, and reports what a fault could
//! only signal: a page that cannot be allocated is an error here rather
//! than a `SIGBUS` or an out-of-memory kill on a write later. Page
//! allocation is the kernel's work per page, so large ranges are split
//! across cores.
//!
//! # Safety
//!
//! This module opts in to `unsafe` for `madvise(MADV_POPULATE_WRITE)` alone.
//! On a shared mapping it faults each page in as a write would (allocating
//! the file's missing pages, zeroed) and changes no byte of memory; the
//! caller passes a range of one mapping it owns whole, so no other mapping
//! is touched.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use nix::errno::Errno;
use nix::sys::mman::{MmapAdvise, madvise};

/// Bytes each thread populates at least: below this, starting a thread
/// costs more than it saves.
const MIN_BYTES_PER_THREAD: usize = 8 << 20;

/// Chunks start at multiples of this, which is a multiple of every page
/// size Linux uses for such mappings.
const CHUNK_ALIGN: usize = 2 << 20;

/// Whether the kernel refused `MADV_POPULATE_WRITE` (before 5.14).
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// Populates `len` bytes from `start` for writing.
///
/// # Errors
///
/// `EINVAL` on kernels without `MADV_POPULATE_WRITE`, `ENOMEM` when memory
/// runs out, `EFAULT` where a write would have raised `SIGBUS` (a full or
/// over-committed shared-memory filesystem).
///
/// # Safety
///
/// `start..start + len` is a page-aligned range of one `MAP_SHARED`,
/// writable mapping the caller owns.
pub(crate) unsafe fn populate_writable(start: NonNull<u8>, len: usize) -> Result<(), Errno> {
    // A kernel that refused the call once refuses it always: no more
    // threads and failing calls for every segment.
    if UNSUPPORTED.load(Ordering::Relaxed) {
        return Err(Errno::EINVAL);
    }
    let threads = threads_for(len);
    if threads <= 1 {
        // SAFETY: the caller's contract.
        return unsafe { populate(start, len) };
    }
    let chunk = len.div_ceil(threads).next_multiple_of(CHUNK_ALIGN);
    // Addresses cross to the helper threads as integers: raw pointers are
    // not `Send`, and each thread derives its own from the one range.
    let base = start.as_ptr() as usize;
    let populate_chunk = move |offset: usize| {
        let end = offset.saturating_add(chunk).min(len);
        let Some(start) = NonNull::new((base + offset) as *mut u8) else {
            return Err(Errno::EINVAL);
        };
        // SAFETY: `offset..end` lies within the caller's range, and
        // `offset` is a multiple of `CHUNK_ALIGN` from its page-aligned
        // start.
        unsafe { populate(start, end - offset) }
    };
    thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads)
            .map(|index| index * chunk)
            .filter(|&offset| offset < len)
            .map(|offset| {
                let helper = thread::Builder::new()
                    .name("tensorshare-populate".into())
                    .spawn_scoped(scope, move || populate_chunk(offset));
                (offset, helper)
            })
            .collect();
        let mut result = populate_chunk(0);
        for (offset, helper) in helpers {
            // A chunk whose thread could not start, or stopped, is done here.
            let done = match helper.map(|handle| handle.join()) {
                Ok(Ok(done)) => done,
                _ => populate_chunk(offset),
            };
            result = result.and(done);
        }
        result
    })
}

/// How many threads populate `len` bytes: one per [`MIN_BYTES_PER_THREAD`],
/// at most one per core.
fn threads_for(len: usize) -> usize {
    // Asked once: the answer reads cgroup files.
    static CORES: OnceLock<usize> = OnceLock::new();
    let wanted = len / MIN_BYTES_PER_THREAD;
    if wanted <= 1 {
        return 1;
    }
    let cores = *CORES.get_or_init(|| thread::available_parallelism().map_or(1, usize::from));
    wanted.min(cores)
}

/// One `madvise` over the range, retried when a signal interrupts it (what
/// it already populated stays, so a retry only finishes the rest).
///
/// # Safety
///
/// As [`populate_writable`].
unsafe fn populate(start: NonNull<u8>, len: usize) -> Result<(), Errno> {
    loop {
        // SAFETY: the range is part of a shared, writable mapping the caller
        // owns; populating changes no byte of it (module docs).
        let result =
            unsafe { madvise(start.cast::<c_void>(), len, MmapAdvise::MADV_POPULATE_WRITE) };
        match result {
            Err(Errno::EINTR) => continue,
            Err(Errno::EINVAL) => {
                UNSUPPORTED.store(true, Ordering::Relaxed);
                return Err(Errno::EINVAL);
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use nix::sys::resource::{UsageWho, getrusage};

    use nix::sys::memfd::{MFdFlags, memfd_create};

    use crate::file_descriptor::FileDescriptorStrategy;
    use crate::mapping::SharedMapping;
    use crate::{SharingStrategy, WritableSegment};

    const PAGE: usize = 4096;

    /// Minor page faults this thread takes writing all of `bytes`.
    fn faults_writing(bytes: &mut [u8]) -> i64 {
        let faults = || {
            getrusage(UsageWho::RUSAGE_THREAD)
                .expect("getrusage")
                .minor_page_faults()
        };
        let before = faults();
        bytes.fill(7);
        faults() - before
    }

    #[test]
    fn writing_a_plain_shared_mapping_faults_once_a_page() {
        // The control: without populating, the counter sees the faults.
        let pages = 64;
        let fd = memfd_create("populate-test", MFdFlags::MFD_CLOEXEC).expect("memfd");
        nix::unistd::ftruncate(&fd, (pages * PAGE) as i64).expect("ftruncate");
        // SAFETY: the memfd was just sized to the mapped length, and
        // nothing else holds it to shrink it.
        let mut mapping = unsafe { SharedMapping::map(fd.as_fd(), pages * PAGE) }.expect("map");
        let faults = faults_writing(mapping.as_mut_slice());
        assert!(
            faults >= pages as i64 / 2,
            "{faults} faults for {pages} pages"
        );
    }

    #[test]
    fn a_fresh_segments_writer_takes_no_page_faults() {
        // One page, one thread's worth, and enough for several threads,
        // with a last chunk shorter than the others.
        for nbytes in [PAGE, 1 << 20, (40 << 20) + 3 * PAGE] {
            let mut segment = FileDescriptorStrategy.allocate(nbytes).expect("allocate");
            let faults = faults_writing(segment.as_bytes_mut());
            let pages = nbytes / PAGE;
            assert!(
                faults <= (pages / 100) as i64 + 1,
                "{faults} faults writing {pages} populated pages"
            );
        }
    }
}
