//! The `file_descriptor` strategy: an anonymous shared memory file whose fd
//! travels to the other process.
//!
//! Allocation creates a memfd (`MFD_CLOEXEC | MFD_ALLOW_SEALING`), or an
//! unlinked `shm_open` object where memfds are unavailable, sizes it with
//! `ftruncate`, seals it against shrinking and growing, maps it
//! `MAP_SHARED` read-write, and populates every page of the mapping
//! (`MADV_POPULATE_WRITE`; `fallocate` on kernels before 5.14, and before
//! mapping for the `shm_open` object, which lives in the sized `/dev/shm`).
//! Having the pages first turns "out of memory" into an allocation error
//! instead of a `SIGBUS` when a page is first written, and spares the writer
//! a page fault per page.
//! The handle is a duplicate of the fd ([`OwnedFd`]); it reaches the other
//! process by `SCM_RIGHTS`
//! ([`crate::platform::fd_passing`]), which is how PyTorch's `file_descriptor`
//! strategy moves it too. Data starts at offset 0.
//!
//! Import takes an fd from anywhere, including PyTorch (which sends
//! unlinked `shm_open` objects), checks with `fstat` that it is a regular
//! file at least as large as the storage, and maps it.
//! [`FdSegment::identity`] gives `(st_dev, st_ino)`, the key PyTorch's
//! receive cache uses to recognise the same storage arriving twice.
//!
//! # Shrinking
//!
//! A memfd this crate allocates is sealed against shrinking, and so is a
//! received one that allows sealing. A tmpfs object that refuses seals (the
//! `shm_open` fallback, every fd PyTorch sends) can still be truncated by a
//! process that holds an fd for it, after it was mapped here; such mappings
//! are registered with the crate's fault guard, so a page lost that way reads
//! as zeros rather than killing this process with `SIGBUS`, and
//! [`FdSegment::was_truncated`] tells. PyTorch never resizes shared storages.
//!
//! # Safety
//!
//! This module opts in to `unsafe` only to call the private
//! `SharedMapping::map` and `SharedMapping::map_guarded`, whose contract is
//! that the file covers the mapped range, and, for `map`, that it cannot
//! shrink:
//!
//! - after allocation, `ftruncate` has just sized the object; on import,
//!   `fstat` has just shown the object covers the range;
//! - `map` is used only when `F_SEAL_SHRINK` is among the object's seals
//!   (we add it where the kernel allows); every other object is mapped with
//!   `map_guarded`.
#![allow(unsafe_code)]

mod anonymous_object;
mod fd_budget;

use std::any::Any;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use nix::errno::Errno;
use nix::sys::stat::{FileStat, fstat};
use nix::unistd::ftruncate;

use crate::platform::errno_of;
use crate::platform::mapping::{SharedMapping, file_type, is_regular_file, provision, reserve};
use crate::strategy::error::{MAX_SEGMENT_BYTES, check_covers};
use crate::{
    AllocateError, ExportError, ImportError, Segment, SharingStrategy, StrategyKind,
    WritableSegment,
};
use fd_budget::FdSlot;

pub use fd_budget::FdBudget;

/// The `file_descriptor` strategy. It has no configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileDescriptorStrategy;

/// Which file an fd refers to: `(st_dev, st_ino)` from `fstat`.
///
/// Two fds with the same identity share the same memory; the runtime's cache
/// keys received storages by it, as PyTorch does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileIdentity {
    /// `st_dev`: the device holding the file.
    pub dev: u64,
    /// `st_ino`: the file's inode number on that device.
    pub ino: u64,
}

impl FileIdentity {
    pub(crate) fn of(stat: &FileStat) -> Self {
        FileIdentity {
            dev: stat.st_dev,
            ino: stat.st_ino,
        }
    }
}

/// A shared memory file mapped in this process, with its fd unless a
/// received segment gave it up ([`keep_fd_within`](Self::keep_fd_within)).
///
/// Dropping it unmaps the memory and closes the fd; the file itself lives on
/// while any process holds an fd or a mapping of it.
#[derive(Debug)]
pub struct FdSegment {
    // Field order is drop order: unmap before closing, as the mapping was
    // made from the fd (either order is valid for the kernel).
    mapping: SharedMapping,
    fd: Option<OwnedFd>,
    /// The fd's place in the receiver's [`FdBudget`], for a received
    /// segment that kept its fd.
    slot: Option<FdSlot>,
    identity: FileIdentity,
    /// Whether the file's seals include `F_SEAL_SHRINK`: export need not
    /// try to seal it again.
    sealed: bool,
}

impl FdSegment {
    /// The fd of the shared memory file, borrowed; the segment keeps owning
    /// it. `None` once a received segment gave it up
    /// ([`keep_fd_within`](Self::keep_fd_within)); segments this process
    /// allocates always have it.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(OwnedFd::as_fd)
    }

    /// Keeps the fd while `budget` has room, else closes it now.
    ///
    /// The mapping holds the file, so the segment reads and writes the same
    /// shared memory either way, and its file's identity cannot pass to
    /// another file while it lives. Without its fd, the segment cannot be
    /// [exported](SharingStrategy::export) (the runtime sends such a
    /// storage on as a copy) and its file no longer counts against this
    /// process's fd limit. A segment that holds a place in a budget
    /// already, or that gave up its fd, is left as it is.
    pub fn keep_fd_within(&mut self, budget: &FdBudget) {
        if self.slot.is_some() || self.fd.is_none() {
            return;
        }
        self.slot = budget.take();
        if self.slot.is_none() {
            self.fd = None;
        }
    }

    /// `(st_dev, st_ino)` of the shared memory file.
    pub fn identity(&self) -> FileIdentity {
        self.identity
    }

    /// Whether part of the segment was lost because another process
    /// shrank the shared memory file after it was mapped here.
    ///
    /// Only a file that refuses seals can shrink (see the module's
    /// [Shrinking](crate::strategy::file_descriptor#shrinking) section); a page of it touched after it
    /// was lost is replaced, in this process only, by a page of zeros
    /// instead of killing the process with `SIGBUS`. From then on this
    /// returns `true`: the bytes past the file's new end read as zeros here,
    /// and writes to them are not shared with any other process. Check it
    /// after reading a segment from a sender you do not control, and discard
    /// what you read when it is `true`.
    ///
    /// It also turns `true` when shared memory (`/dev/shm`) ran out as a page
    /// of a file with unallocated pages was first touched: that page reads as
    /// zeros alike. Always `false` for a file sealed against shrinking, such
    /// as every segment this crate allocates where memfds are available.
    pub fn was_truncated(&self) -> bool {
        self.mapping.was_truncated()
    }

    /// A new close-on-exec fd for the same file (`F_DUPFD_CLOEXEC`).
    ///
    /// Unlike [`SharingStrategy::export`] it does not seal the file; export
    /// is what to use before handing the fd to another process.
    ///
    /// # Errors
    ///
    /// [`ExportError::FdReleased`] when the segment gave up its fd,
    /// [`ExportError::TooManyOpenFiles`] when the fd table is full, else
    /// [`ExportError::Duplicate`].
    pub fn try_clone_fd(&self) -> Result<OwnedFd, ExportError> {
        self.fd
            .as_ref()
            .ok_or(ExportError::FdReleased)?
            .try_clone()
            .map_err(|err| ExportError::from_dup_errno(errno_of(&err)))
    }
}

/// The mapping of a sealed memfd whose segment has ended, kept so that the
/// same file arriving again maps without an `mmap` and with its pages
/// still in place. Dropping it unmaps.
#[derive(Debug)]
pub struct DormantMapping {
    mapping: SharedMapping,
    identity: FileIdentity,
}

impl DormantMapping {
    /// `(st_dev, st_ino)` of the file it maps.
    pub fn identity(&self) -> FileIdentity {
        self.identity
    }

    /// How many bytes it maps.
    pub fn len(&self) -> usize {
        self.mapping.len()
    }

    /// Whether it maps no bytes (the dormant mapping of an empty segment).
    pub fn is_empty(&self) -> bool {
        self.mapping.len() == 0
    }
}

impl Segment for FdSegment {
    fn as_bytes(&self) -> &[u8] {
        self.mapping.as_slice()
    }

    fn len(&self) -> usize {
        self.mapping.len()
    }

    fn kind(&self) -> StrategyKind {
        StrategyKind::FileDescriptor
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn can_export(&self) -> bool {
        self.fd.is_some()
    }
}

impl WritableSegment for FdSegment {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.mapping.as_mut_slice()
    }

    fn into_shared(self: Box<Self>) -> Arc<dyn Segment> {
        Arc::new(*self)
    }
}

impl SharingStrategy for FileDescriptorStrategy {
    const KIND: StrategyKind = StrategyKind::FileDescriptor;
    type Segment = FdSegment;
    /// A duplicate of the segment's fd, sealed against resizing where
    /// possible; send it with [`crate::platform::fd_passing`].
    type Handle = OwnedFd;
    type Received = ReceivedFd;
    type Key = FileIdentity;
    type Dormant = DormantMapping;

    fn allocate(&self, nbytes: usize) -> Result<FdSegment, AllocateError> {
        let file_len = i64::try_from(nbytes)
            .ok()
            .filter(|_| nbytes <= MAX_SEGMENT_BYTES)
            .ok_or(AllocateError::TooLarge { nbytes })?;
        let fd = anonymous_object::create()
            .map_err(|errno| AllocateError::create_object(nbytes, errno))?;
        ftruncate(&fd, file_len).map_err(|errno| AllocateError::resize(nbytes, errno))?;
        // Only a memfd takes seals; the `shm_open` fallback lives in the
        // sized `/dev/shm`, where pages are reserved before mapping.
        let sealed = anonymous_object::seal_size(fd.as_fd());
        if !sealed {
            reserve(fd.as_fd(), file_len).map_err(|errno| AllocateError::resize(nbytes, errno))?;
        }
        let stat = fstat(&fd).map_err(|errno| AllocateError::CreateObject { errno })?;
        // SAFETY: `ftruncate` just sized the object to exactly `nbytes`;
        // `sealed` is what `seal_size` found (the unlinked shm fallback,
        // which a receiver could truncate, is not).
        let mut mapping = unsafe { map_sized(fd.as_fd(), nbytes, sealed) }
            .map_err(|errno| AllocateError::map(nbytes, errno))?;
        if sealed {
            provision(&mut mapping, fd.as_fd(), file_len)
                .map_err(|errno| AllocateError::resize(nbytes, errno))?;
        }
        Ok(FdSegment {
            mapping,
            fd: Some(fd),
            slot: None,
            identity: FileIdentity::of(&stat),
            sealed,
        })
    }

    fn export(&self, segment: &FdSegment) -> Result<OwnedFd, ExportError> {
        // Sealed here for segments that were imported unsealed: a memfd
        // from another process may allow sealing later, and our receivers
        // rely on its size. One sealed already stays sealed: no syscall.
        let fd = segment.fd().ok_or(ExportError::FdReleased)?;
        if !segment.sealed {
            let _sealed = anonymous_object::seal_size(fd);
        }
        segment.try_clone_fd()
    }

    fn open(&self, fd: OwnedFd) -> Result<ReceivedFd, ImportError> {
        ReceivedFd::new(fd)
    }

    fn map_received(
        &self,
        received: ReceivedFd,
        nbytes: usize,
        dormant: Option<DormantMapping>,
    ) -> Result<FdSegment, ImportError> {
        match dormant {
            Some(dormant) => self.map_reusing(received, nbytes, dormant),
            None => self.map_fresh(received, nbytes),
        }
    }

    /// Closes the fd and keeps the mapping, for a segment whose file is
    /// sealed against shrinking (the mapping then stays valid whoever else
    /// holds the file): a later segment of the same file maps with no
    /// `mmap`. `None`, the segment unmapped, for a file that may shrink.
    fn keep_dormant(&self, segment: FdSegment) -> Option<DormantMapping> {
        let FdSegment {
            mapping,
            fd,
            slot,
            identity,
            sealed,
        } = segment;
        drop((fd, slot));
        sealed.then_some(DormantMapping { mapping, identity })
    }

    fn received_key(received: &ReceivedFd) -> Option<FileIdentity> {
        Some(received.identity())
    }

    fn segment_key(segment: &FdSegment) -> Option<FileIdentity> {
        Some(segment.identity)
    }
}

impl FileDescriptorStrategy {
    /// Maps an fd already stat'ed, afresh.
    fn map_fresh(&self, received: ReceivedFd, nbytes: usize) -> Result<FdSegment, ImportError> {
        let ReceivedFd { fd, stat } = received;
        if nbytes > MAX_SEGMENT_BYTES {
            return Err(ImportError::TooLarge { nbytes });
        }
        if !is_regular_file(&stat) {
            return Err(ImportError::InvalidHandle {
                reason: format!(
                    "the received file descriptor is not a shared memory file (file type {:o}); \
                     the sender is not sharing a storage",
                    file_type(&stat).bits()
                ),
            });
        }
        check_covers(&stat, 0, nbytes)?;
        let sealed = anonymous_object::seal_size(fd.as_fd());
        // SAFETY: `fstat` just showed the file holds at least `nbytes`
        // bytes; `sealed` is what `seal_size` found.
        let mapping = unsafe { map_sized(fd.as_fd(), nbytes, sealed) }
            .map_err(|errno| ImportError::from_map_errno(nbytes, errno))?;
        Ok(FdSegment {
            mapping,
            fd: Some(fd),
            slot: None,
            identity: FileIdentity::of(&stat),
            sealed,
        })
    }

    /// Takes over `dormant` when it maps the first `nbytes` of the received
    /// file: the segment is then made with no `mmap` and no sealing (the
    /// file was sealed when it was first mapped, and seals are never
    /// removed). Otherwise `dormant` is unmapped and the fd mapped afresh.
    fn map_reusing(
        &self,
        received: ReceivedFd,
        nbytes: usize,
        dormant: DormantMapping,
    ) -> Result<FdSegment, ImportError> {
        // The dormant mapping keeps its file alive, so no other file can
        // have its identity, and that file was a regular one, sealed against
        // shrinking, covering the mapping. The type and size checks cost no
        // syscall and keep this path as strict as a fresh import.
        let same_file = dormant.identity == received.identity()
            && dormant.mapping.len() == nbytes
            && is_regular_file(&received.stat)
            && check_covers(&received.stat, 0, nbytes).is_ok();
        if !same_file {
            drop(dormant);
            return self.map_fresh(received, nbytes);
        }
        Ok(FdSegment {
            mapping: dormant.mapping,
            fd: Some(received.fd),
            slot: None,
            identity: dormant.identity,
            sealed: true,
        })
    }
}

/// An fd that arrived from another process, with the `fstat` taken of it
/// once: its [`identity`](ReceivedFd::identity) picks a cached mapping, and
/// [`map_received`](SharingStrategy::map_received) checks the same stat.
#[derive(Debug)]
pub struct ReceivedFd {
    fd: OwnedFd,
    stat: FileStat,
}

impl ReceivedFd {
    /// Takes `fd`'s `fstat`.
    ///
    /// # Errors
    ///
    /// [`ImportError::Stat`] when `fstat` fails.
    pub fn new(fd: OwnedFd) -> Result<Self, ImportError> {
        let stat = fstat(&fd).map_err(|errno| ImportError::Stat { errno })?;
        Ok(Self { fd, stat })
    }

    /// An fd whose `fstat` was taken already.
    pub(crate) fn with_stat(fd: OwnedFd, stat: FileStat) -> Self {
        Self { fd, stat }
    }

    /// The fd and its `fstat`.
    pub(crate) fn into_parts(self) -> (OwnedFd, FileStat) {
        (self.fd, self.stat)
    }

    /// `(st_dev, st_ino)` of the file.
    pub fn identity(&self) -> FileIdentity {
        FileIdentity::of(&self.stat)
    }
}

/// Maps the first `len` bytes of `fd`, guarded unless `sealed`.
///
/// # Safety
///
/// The file holds at least `len` bytes, and if `sealed`, its seals include
/// `F_SEAL_SHRINK`; other processes may write the pages, as the
/// [`Segment`] docs say.
unsafe fn map_sized(fd: BorrowedFd<'_>, len: usize, sealed: bool) -> Result<SharedMapping, Errno> {
    if sealed {
        // SAFETY: the file covers `len` bytes and is sealed against
        // shrinking, the caller's contract.
        unsafe { SharedMapping::map(fd, len) }
    } else {
        // SAFETY: the file covers `len` bytes now, the caller's contract.
        unsafe { SharedMapping::map_guarded(fd, len) }
    }
}

#[cfg(test)]
mod page_faults;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_shared_by_exported_fds() {
        let strategy = FileDescriptorStrategy;
        let segment = strategy.allocate(16).expect("allocate");
        let other = strategy.allocate(16).expect("allocate");
        let imported = strategy
            .import(strategy.export(&segment).expect("export"), 16)
            .expect("import");
        assert_eq!(imported.identity(), segment.identity());
        assert_ne!(other.identity(), segment.identity());
    }

    #[test]
    fn importing_a_pipe_is_an_invalid_handle() {
        let (reader, _writer) = nix::unistd::pipe().expect("pipe");
        let err = FileDescriptorStrategy.import(reader, 1).unwrap_err();
        assert!(matches!(err, ImportError::InvalidHandle { .. }), "{err}");
    }

    #[test]
    fn importing_a_read_only_file_fails_to_map_with_eacces() {
        let file = std::fs::File::open("/proc/self/exe").expect("open");
        let err = FileDescriptorStrategy
            .import(OwnedFd::from(file), 1)
            .unwrap_err();
        assert_eq!(
            err,
            ImportError::Map {
                nbytes: 1,
                errno: Errno::EACCES
            }
        );
    }

    #[test]
    fn shm_object_serves_as_segment() {
        // The fallback object goes through the same import path a torch fd does.
        let fd = anonymous_object::create_unlinked_shm().expect("shm");
        ftruncate(&fd, 100).expect("ftruncate");
        let mut segment = FileDescriptorStrategy.import(fd, 100).expect("import");
        segment.as_bytes_mut()[99] = 7;
        let again = FileDescriptorStrategy
            .import(
                FileDescriptorStrategy.export(&segment).expect("export"),
                100,
            )
            .expect("import");
        assert_eq!(again.as_bytes()[99], 7);
    }
}
