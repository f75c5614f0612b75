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
//! No `unsafe` here: memmap2 gives the advice ([`Advice::PopulateWrite`]),
//! which on a shared mapping faults each page in as a write would
//! (allocating the file's missing pages, zeroed) and changes no byte of
//! memory.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use memmap2::{Advice, MmapRaw};
use nix::errno::Errno;

use super::errno_of;

/// Bytes each thread populates at least: below this, starting a thread
/// costs more than it saves.
const MIN_BYTES_PER_THREAD: usize = 8 << 20;

/// Chunks start at multiples of this, which is a multiple of every page
/// size Linux uses for such mappings.
const CHUNK_ALIGN: usize = 2 << 20;

/// Whether the kernel refused `MADV_POPULATE_WRITE` (before 5.14).
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// Populates the whole of `map`, a `MAP_SHARED` writable mapping, for
/// writing.
///
/// # Errors
///
/// `EINVAL` on kernels without `MADV_POPULATE_WRITE`, `ENOMEM` when memory
/// runs out, `EFAULT` where a write would have raised `SIGBUS` (a full or
/// over-committed shared-memory filesystem).
pub(crate) fn populate_writable(map: &MmapRaw) -> Result<(), Errno> {
    // A kernel that refused the call once refuses it always: no more
    // threads and failing calls for every segment.
    if UNSUPPORTED.load(Ordering::Relaxed) {
        return Err(Errno::EINVAL);
    }
    let len = map.len();
    let threads = threads_for(len);
    if threads <= 1 {
        return populate(map, 0, len);
    }
    let chunk = len.div_ceil(threads).next_multiple_of(CHUNK_ALIGN);
    // Each chunk starts at a multiple of `CHUNK_ALIGN` from the mapping's
    // page-aligned start.
    let populate_chunk = |offset: usize| {
        let end = offset.saturating_add(chunk).min(len);
        populate(map, offset, end - offset)
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

/// One `madvise` over `len` bytes of `map` from `offset`, retried when a
/// signal interrupts it (what it already populated stays, so a retry only
/// finishes the rest).
fn populate(map: &MmapRaw, offset: usize, len: usize) -> Result<(), Errno> {
    loop {
        let result = map
            .advise_range(Advice::PopulateWrite, offset, len)
            .map_err(|error| errno_of(&error));
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
