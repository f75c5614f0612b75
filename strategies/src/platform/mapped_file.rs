//! Read-only mappings of whole files on disk: how checkpoints are read at
//! the speed of the page cache, in memory the kernel can take back.
//!
//! memmap2 maps and unmaps ([`Mmap`](https://docs.rs/memmap2/0.9/memmap2/struct.Mmap.html)). A [`MappedFile`] adds what a reader
//! of files that other programs may rewrite needs:
//!
//! - The fault guard (the private `fault_guard` module): a file
//!   truncated while it is mapped here (a checkpoint rewritten in place by a
//!   training job) would raise `SIGBUS` on the first touch of a lost page
//!   and kill the process. The mapping is registered with the guard, so
//!   those pages read as zeros and [`MappedFile::was_truncated`] tells; a
//!   reader checks it after parsing and after copying bytes out, and reports
//!   the file as changed instead of using what it read.
//! - Giving pages back ([`MappedFile::release`]): a reader streaming a large
//!   file through the mapping drops the pages it is done with from this
//!   process, so its resident memory stays bounded by what it holds at once
//!   rather than growing to the file's size. The page cache keeps them.
//!
//! # Safety
//!
//! This module opts in to `unsafe` for three things:
//!
//! - Mapping the file (memmap2's `map` is `unsafe` because another process
//!   may change the file under the mapping). The mapping is read-only and
//!   `MAP_SHARED`; bytes another process writes to the file show through
//!   it, as writes to a shared segment do (the [`Segment`](crate::Segment)
//!   docs state that contract, and every bit pattern is a valid `u8`); bytes
//!   lost to truncation read as zeros through the guard below.
//! - Registering the mapping with the fault guard: the range is the mapping
//!   this type owns, registered before the mapping is handed out and
//!   unregistered in `Drop` before memmap2 unmaps it.
//! - `MADV_DONTNEED` over a range ([`MappedFile::release`]): for a
//!   read-only shared mapping of a file it only drops this process's page
//!   table entries; the next read faults the same bytes in again from the
//!   page cache or the file. No reference is invalidated and no byte a
//!   reader sees changes.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::num::NonZeroUsize;
use std::ops::Range;
use std::path::Path;
use std::ptr::NonNull;

use memmap2::{Advice, Mmap, MmapOptions, UncheckedAdvice};

use super::fault_guard::GuardedRange;

/// A read-only mapping of a whole file, guarded against the file shrinking
/// while it is mapped.
///
/// # Examples
///
/// ```
/// use std::io::Write;
/// use tensorshare_strategies::platform::mapped_file::MappedFile;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut file = tempfile::NamedTempFile::new()?;
/// file.write_all(b"checkpoint bytes")?;
/// let mapped = MappedFile::open(file.path())?;
/// assert_eq!(mapped.as_bytes(), b"checkpoint bytes");
/// assert!(!mapped.was_truncated());
/// # Ok(())
/// # }
/// ```
pub struct MappedFile {
    /// The fault guard's registration; dropped (unregistered) in `Drop`,
    /// before `map` unmaps the range.
    guard: Option<GuardedRange>,
    /// The mapping; `None` for an empty file, since `mmap` refuses a zero
    /// length.
    map: Option<Mmap>,
}

/// What [`MappedFile::open_or_stream`] opened.
#[derive(Debug)]
pub enum MappedOrStream {
    /// A regular file, mapped.
    Mapped(MappedFile),
    /// Anything else, open for reading as a stream.
    Stream(File),
}

impl MappedFile {
    /// Maps the file at `path`.
    ///
    /// # Errors
    ///
    /// What opening the file fails with, and as [`map`](Self::map).
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        Self::map(&File::open(path)?)
    }

    /// Opens the file at `path` and maps it when it is a regular file;
    /// anything else (a pipe, a terminal) comes back open, to be read as a
    /// stream.
    ///
    /// # Errors
    ///
    /// What opening the file fails with, and as [`map`](Self::map) for a
    /// regular file.
    pub fn open_or_stream(path: impl AsRef<Path>) -> io::Result<MappedOrStream> {
        let file = File::open(path)?;
        if !file.metadata()?.file_type().is_file() {
            return Ok(MappedOrStream::Stream(file));
        }
        Self::map(&file).map(MappedOrStream::Mapped)
    }

    /// Maps all of `file`, which must be a regular file open for reading.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for a file that is not a regular
    /// file (a pipe, a terminal, a directory: read those as a stream),
    /// [`io::ErrorKind::FileTooLarge`] for one larger than the address space,
    /// and the error of `fstat` or `mmap`; `ENOMEM` too when the fault guard
    /// cannot register the range.
    pub fn map(file: &File) -> io::Result<Self> {
        let metadata = file.metadata()?;
        if !metadata.file_type().is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file, so it cannot be mapped",
            ));
        }
        let len = usize::try_from(metadata.len())
            .ok()
            .filter(|&len| len <= isize::MAX as usize)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::FileTooLarge,
                    "the file is larger than this process's address space",
                )
            })?;
        let Some(len) = NonZeroUsize::new(len) else {
            return Ok(MappedFile {
                guard: None,
                map: None,
            });
        };
        // SAFETY: a read-only `MAP_SHARED` mapping of a regular file of
        // `len` bytes (fstat just said so). Changes other processes make to
        // the file show through it as any bytes (the module's Safety
        // section); pages lost to truncation read as zeros through the
        // guard registered below, before the mapping is handed out.
        let map = unsafe { MmapOptions::new().len(len.get()).map(file) }?;
        let start = NonNull::new(map.as_ptr().cast_mut())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        // SAFETY: `start..start + len` is the page-aligned range memmap2
        // just mapped, owned by the value built below, whose `Drop` drops
        // the guard before `map` is unmapped. On an error the mapping is
        // dropped unregistered, never having been handed out.
        let guard = unsafe { GuardedRange::register(start, len) }
            .map_err(|errno| io::Error::from_raw_os_error(errno as i32))?;
        Ok(MappedFile {
            guard: Some(guard),
            map: Some(map),
        })
    }

    /// The file's bytes, as they were when it was mapped unless it changed
    /// since (see [`was_truncated`](Self::was_truncated)).
    pub fn as_bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
    }

    /// The file's length when it was mapped.
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// Whether the file was empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a page of the mapping was lost to the file shrinking, and
    /// read as zeros since: what was read from the mapping is not the file's.
    pub fn was_truncated(&self) -> bool {
        self.guard.as_ref().is_some_and(GuardedRange::was_truncated)
    }

    /// Tells the kernel the mapping will be read from start to end, once:
    /// it reads ahead further and drops pages behind sooner. Only advice:
    /// a kernel that refuses it changes nothing.
    pub fn advise_sequential(&self) {
        if let Some(map) = &self.map {
            // Advice only: a refusal leaves reads as they were.
            let _ = map.advise(Advice::Sequential);
        }
    }

    /// Drops the pages wholly inside `range` from this process: a reader
    /// done with a part of the file gives its memory back, and reads of it
    /// later fault the same bytes in again. Ranges outside the file are
    /// cut to it; partial pages at either end are kept.
    pub fn release(&self, range: Range<usize>) {
        let Some(map) = &self.map else {
            return;
        };
        let page = page_size();
        let start = range.start.next_multiple_of(page);
        let end = range.end.min(map.len()) / page * page;
        if start >= end {
            return;
        }
        // SAFETY: a read-only `MAP_SHARED` mapping of a file: dropping its
        // pages changes no byte a reader sees (the next access reads them
        // from the page cache or the file again), as the module's Safety
        // section says. The range lies inside the mapping.
        let _ =
            unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, start, end - start) };
    }
}

/// The page size; 4096 when `sysconf` does not say.
fn page_size() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|size| usize::try_from(size).ok())
        .filter(|&size| size.is_power_of_two())
        .unwrap_or(4096)
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // Unregistered first, so that the fault guard never patches a
        // later, unrelated mapping at this address; memmap2 unmaps the range
        // when `self.map` is dropped after this.
        drop(self.guard.take());
    }
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedFile")
            .field("len", &self.len())
            .field("guard", &self.guard)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_file_truncated_while_mapped_reads_zeros_and_says_so() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        let page = page_size();
        file.write_all(&vec![7u8; 4 * page]).unwrap();
        let mapped = MappedFile::open(file.path()).unwrap();
        assert_eq!(mapped.as_bytes()[3 * page], 7);
        assert!(!mapped.was_truncated());
        file.as_file().set_len(page as u64).unwrap();
        // Without the guard this read raises SIGBUS and ends the test binary.
        assert_eq!(mapped.as_bytes()[3 * page], 0);
        assert_eq!(mapped.as_bytes()[0], 7);
        assert!(mapped.was_truncated());
    }

    #[test]
    fn released_pages_read_the_same_bytes_again() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        let page = page_size();
        let bytes: Vec<u8> = (0..3 * page + 5).map(|i| (i % 251) as u8).collect();
        file.write_all(&bytes).unwrap();
        let mapped = MappedFile::open(file.path()).unwrap();
        assert_eq!(mapped.as_bytes(), &bytes[..]);
        mapped.release(1..mapped.len() + 100);
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 5..3;
        mapped.release(reversed);
        assert_eq!(mapped.as_bytes(), &bytes[..]);
    }

    #[test]
    fn empty_files_map_to_no_bytes_and_directories_are_refused() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let mapped = MappedFile::open(file.path()).unwrap();
        assert!(mapped.is_empty());
        mapped.release(0..10);
        let dir = tempfile::tempdir().unwrap();
        let error = MappedFile::open(dir.path()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{error}");
    }
}
