//! The `tmpfile` strategy: an unnamed file on disk (`O_TMPFILE`) whose fd
//! travels to the other process, as `file_descriptor`'s memfd does.
//!
//! It is built only with `--cfg tensorshare_tmpfile`, and exists to show
//! what adding a strategy takes (`CONTRIBUTING.md` walks through it): this
//! module, its line in the list in `strategy.rs`, its form in the runtime,
//! and that form's line there. The conformance suites run against it as
//! against the other four. Its memory is a disk's, not `/dev/shm`'s, and
//! it has no name to leak: the file is unlinked from birth, and goes with
//! its last fd and mapping, whoever is killed. A strategy for users would
//! also say where the directory is and what to do on a full disk.
//!
//! Allocation opens an unnamed file in the directory (`$TMPDIR`, else
//! `/tmp`), sizes it, reserves its blocks (`fallocate`, so that a full disk
//! is an error here rather than a `SIGBUS` on first write) and maps it
//! shared. Import takes an fd from anywhere, checks that it is a regular
//! file covering the storage, and maps it; [`FileIdentity`] is the key.
//!
//! # Safety
//!
//! This module opts in to `unsafe` only to call `SharedMapping::map_guarded`,
//! whose contract is that the file covers the mapped range: `ftruncate` has
//! just sized a file this module allocated, and `fstat` has just shown a
//! received one covers the range. A holder that truncates the file later
//! is what the guard handles.
#![allow(unsafe_code)]

use std::any::Any;
use std::convert::Infallible;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use nix::fcntl::{OFlag, open};
use nix::sys::stat::{Mode, fstat};
use nix::unistd::ftruncate;

use super::file_descriptor::{FileIdentity, ReceivedFd};
use crate::platform::errno_of;
use crate::platform::mapping::{SharedMapping, is_regular_file, reserve};
use crate::strategy::error::{MAX_SEGMENT_BYTES, check_covers};
use crate::{
    AllocateError, ExportError, ImportError, Segment, SharingStrategy, StrategyKind,
    WritableSegment,
};

/// The `tmpfile` strategy: unnamed files in one directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TmpfileStrategy {
    dir: PathBuf,
}

/// Files in `$TMPDIR`, else `/tmp`.
impl Default for TmpfileStrategy {
    fn default() -> Self {
        Self {
            dir: std::env::temp_dir(),
        }
    }
}

/// An unnamed file mapped in this process, with its fd.
#[derive(Debug)]
pub struct TmpfileSegment {
    // Field order is drop order: unmap before closing.
    mapping: SharedMapping,
    fd: OwnedFd,
    identity: FileIdentity,
}

impl Segment for TmpfileSegment {
    fn as_bytes(&self) -> &[u8] {
        self.mapping.as_slice()
    }

    fn len(&self) -> usize {
        self.mapping.len()
    }

    fn kind(&self) -> StrategyKind {
        StrategyKind::Tmpfile
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl WritableSegment for TmpfileSegment {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.mapping.as_mut_slice()
    }

    fn into_shared(self: Box<Self>) -> Arc<dyn Segment> {
        Arc::new(*self)
    }
}

impl SharingStrategy for TmpfileStrategy {
    const KIND: StrategyKind = StrategyKind::Tmpfile;
    type Segment = TmpfileSegment;
    type Handle = OwnedFd;
    type Received = ReceivedFd;
    type Key = FileIdentity;
    type Dormant = Infallible;

    fn allocate(&self, nbytes: usize) -> Result<TmpfileSegment, AllocateError> {
        if nbytes > MAX_SEGMENT_BYTES {
            return Err(AllocateError::TooLarge { nbytes });
        }
        let flags = OFlag::O_TMPFILE | OFlag::O_RDWR | OFlag::O_CLOEXEC;
        let fd = open(&self.dir, flags, Mode::S_IRUSR | Mode::S_IWUSR)
            .map_err(|errno| AllocateError::create_object(nbytes, errno))?;
        let len = i64::try_from(nbytes).map_err(|_| AllocateError::TooLarge { nbytes })?;
        ftruncate(&fd, len).map_err(|errno| AllocateError::resize(nbytes, errno))?;
        reserve(fd.as_fd(), len).map_err(|errno| AllocateError::resize(nbytes, errno))?;
        let stat = fstat(&fd).map_err(|errno| AllocateError::create_object(nbytes, errno))?;
        // SAFETY: `ftruncate` just sized the file to `nbytes`.
        let mapping = unsafe { SharedMapping::map_guarded(fd.as_fd(), nbytes) }
            .map_err(|errno| AllocateError::map(nbytes, errno))?;
        Ok(TmpfileSegment {
            mapping,
            fd,
            identity: FileIdentity::of(&stat),
        })
    }

    fn export(&self, segment: &TmpfileSegment) -> Result<OwnedFd, ExportError> {
        segment
            .fd
            .try_clone()
            .map_err(|error| ExportError::from_dup_errno(errno_of(&error)))
    }

    fn open(&self, fd: OwnedFd) -> Result<ReceivedFd, ImportError> {
        ReceivedFd::new(fd)
    }

    fn map_received(
        &self,
        received: ReceivedFd,
        nbytes: usize,
        _dormant: Option<Infallible>,
    ) -> Result<TmpfileSegment, ImportError> {
        if nbytes > MAX_SEGMENT_BYTES {
            return Err(ImportError::TooLarge { nbytes });
        }
        let (fd, stat) = received.into_parts();
        if !is_regular_file(&stat) {
            return Err(ImportError::InvalidHandle {
                reason: "the received file descriptor is not a regular file".into(),
            });
        }
        check_covers(&stat, 0, nbytes)?;
        // SAFETY: `fstat` just showed the file covers `nbytes`.
        let mapping = unsafe { SharedMapping::map_guarded(fd.as_fd(), nbytes) }
            .map_err(|errno| ImportError::from_map_errno(nbytes, errno))?;
        Ok(TmpfileSegment {
            mapping,
            fd,
            identity: FileIdentity::of(&stat),
        })
    }

    fn keep_dormant(&self, _segment: TmpfileSegment) -> Option<Infallible> {
        None
    }

    fn received_key(received: &ReceivedFd) -> Option<FileIdentity> {
        Some(received.identity())
    }

    fn segment_key(segment: &TmpfileSegment) -> Option<FileIdentity> {
        Some(segment.identity)
    }
}
