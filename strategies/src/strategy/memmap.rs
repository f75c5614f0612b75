//! The `memmap` strategy: a storage lives in a regular file that every
//! holder maps shared; the file's path travels.
//!
//! A segment is `<dir>/tensorshare_<pid>_<random>_<counter>.mmap`
//! ([`MemmapFileName`]; `tensorshare_kept_...` when the strategy keeps its
//! files), created `O_EXCL` with mode 0600 in the strategy's directory
//! ([`MemmapStrategy::dir`], by default `$TMPDIR` or `/tmp`), sized to
//! exactly the storage's bytes and mapped `MAP_SHARED`; the data starts at
//! byte 0, so stock torch maps the same file with
//! `torch.UntypedStorage.from_file(path, shared=True, nbytes=n)`.
//!
//! The process that created a file removes it when the last holder of its
//! [`FileLease`] drops it, unless the strategy keeps files
//! ([`MemmapStrategy::keep_files`]). The segment holds one lease; a sender
//! that must keep the file for a receiver that never says it mapped it
//! holds another ([`MemmapSegment::lease`]), which costs no fd and no
//! mapping. Importers never remove a file.
//!
//! A creator that is killed removes nothing, and no receiver says when it
//! is done with a file: the files of a creator that is gone are reclaimed
//! once no process has them open or mapped, by `tensorshare gc` and by the
//! first allocation of every strategy in a directory
//! ([`crate::services::orphans`]'s rules, with [`MemmapFileName`] for names).
//!
//! # What an import accepts
//!
//! A path comes from another process and is checked before anything is
//! mapped: it must be absolute, valid UTF-8 (torch's `from_file` takes a
//! `str`), free of `.` and `..` components, and name a file directly inside
//! the importing strategy's directory. The file is opened `O_RDWR |
//! O_NOFOLLOW` (a symbolic link is refused), must be a regular file owned by
//! this process's effective user (checked on the open fd, root included:
//! [`ImportError::OtherUsersObject`] names the owner), and `fstat` must show
//! that it holds the bytes the message announces. A handle that carries a
//! [`FileIdentity`] must name that very file.
//!
//! # Shrinking
//!
//! Any process of the same user can truncate a file while it is mapped here.
//! Every mapping is registered with the crate's fault guard: a page lost that
//! way reads as zeros instead of killing this process with `SIGBUS`, and
//! [`MemmapSegment::was_truncated`] tells.
//!
//! # Safety
//!
//! This module opts in to `unsafe` to map files with
//! `SharedMapping::map_guarded` (the private `mapping` module), only after
//! `ftruncate` sized the file (creation) or `fstat` showed that it covers
//! the mapping (import); a later truncation is what the guard handles.
#![allow(unsafe_code)]

mod orphan_sweep;

use std::any::Any;
use std::convert::Infallible;
use std::ffi::OsStr;
use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{OFlag, open};
use nix::sys::stat::{FileStat, Mode, fstat, lstat};
use nix::unistd::{ftruncate, unlink};
use rustix::fs::{AtFlags, CWD, Statx, StatxFlags, makedev, statx};

use crate::platform::mapping::{SharedMapping, is_regular_file, reserve};
use crate::platform::memmap_marks::{self, CreationTag};
use crate::platform::owner::check_own_user;
use crate::platform::process::{Recipients, SentTo};
use crate::strategy::error::{Exhausted, MAX_SEGMENT_BYTES, check_covers};
use crate::strategy::file_descriptor::{FileIdentity, ReceivedFd};
use crate::{
    AllocateError, ExportError, ImportError, Segment, SharingStrategy, StrategyKind,
    WritableSegment,
};

pub use crate::platform::memmap_file_name::{
    FILE_PREFIX, FILE_SUFFIX, InvalidMemmapFileName, MemmapFileName,
};

/// The `memmap` strategy: storages in files of one directory.
///
/// # Examples
///
/// ```
/// use tensorshare_strategies::memmap::MemmapStrategy;
/// use tensorshare_strategies::{Segment, SharingStrategy, WritableSegment};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let strategy = MemmapStrategy::in_dir(dir.path())?;
/// let mut segment = strategy.allocate(5)?;
/// segment.as_bytes_mut().copy_from_slice(b"hello");
///
/// // What travels: the file's path.
/// let handle = strategy.export(&segment)?;
/// assert!(handle.path().starts_with(dir.path()));
/// let received = strategy.import(handle, 5)?;
/// assert_eq!(received.as_bytes(), b"hello");
///
/// let path = segment.path().to_path_buf();
/// drop((segment, received));
/// assert!(!path.exists(), "removed with its last holder");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemmapStrategy {
    dir: PathBuf,
    keep_files: bool,
}

impl Default for MemmapStrategy {
    /// Files in `$TMPDIR`, or `/tmp` when it is unset or not absolute;
    /// removed with their last holder.
    fn default() -> Self {
        let dir = std::env::var_os("TMPDIR")
            .map(PathBuf::from)
            .filter(|dir| is_plain_absolute(dir))
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        Self {
            dir,
            keep_files: false,
        }
    }
}

/// Why a directory cannot hold `memmap` files.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{dir:?} cannot hold memmap files: {reason}; give an absolute path to an existing directory"
)]
pub struct InvalidMemmapDir {
    /// The directory as given.
    pub dir: PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

impl MemmapStrategy {
    /// A strategy that creates its files in, and imports only from, `dir`.
    ///
    /// A relative `dir` is taken from the current directory.
    ///
    /// # Errors
    ///
    /// [`InvalidMemmapDir`] when `dir` is not valid UTF-8, holds `..`
    /// components, or is not an existing directory.
    pub fn in_dir(dir: impl AsRef<Path>) -> Result<Self, InvalidMemmapDir> {
        let given = dir.as_ref();
        let invalid = |reason: &str| InvalidMemmapDir {
            dir: given.to_path_buf(),
            reason: reason.to_string(),
        };
        let absolute = std::path::absolute(given).map_err(|e| invalid(&e.to_string()))?;
        let dir: PathBuf = absolute.components().collect();
        if !is_plain_absolute(&dir) {
            return Err(invalid("the path is not valid UTF-8 or holds `..`"));
        }
        if !dir.is_dir() {
            return Err(invalid("not an existing directory"));
        }
        Ok(Self {
            dir,
            keep_files: false,
        })
    }

    /// Keeps the files this strategy creates after their last holder drops
    /// them (`true`), instead of removing them (the default).
    pub fn keep_files(mut self, keep: bool) -> Self {
        self.keep_files = keep;
        self
    }

    /// The directory files are created in and imported from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether created files outlive their last holder.
    pub fn keeps_files(&self) -> bool {
        self.keep_files
    }

    /// Checks a received path and opens the file it names read-write.
    fn open_checked(&self, path: &Path, nbytes: usize) -> Result<(OwnedFd, FileStat), ImportError> {
        let invalid = |reason: String| ImportError::InvalidHandle { reason };
        if !is_plain_absolute(path) {
            return Err(invalid(format!(
                "memmap path {path:?} is not an absolute UTF-8 path without `.` or `..`"
            )));
        }
        if path.parent() != Some(self.dir.as_path()) || path.file_name().is_none() {
            return Err(invalid(format!(
                "memmap path {path:?} is not a file directly inside {:?}, the directory this \
                 process accepts memmap files from",
                self.dir
            )));
        }
        let fd = open(
            path,
            OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
            Mode::empty(),
        )
        .map_err(|errno| match errno {
            Errno::ENOENT => ImportError::FileMissing {
                path: path.display().to_string(),
            },
            Errno::ELOOP => invalid(format!("memmap path {path:?} is a symbolic link")),
            Errno::EISDIR => invalid(format!("memmap path {path:?} is not a regular file")),
            Errno::EMFILE | Errno::ENFILE => ImportError::Exhausted {
                nbytes,
                limit: Exhausted::FileDescriptors(errno),
            },
            errno => ImportError::OpenFile {
                path: path.display().to_string(),
                errno,
            },
        })?;
        let stat = fstat(&fd).map_err(|errno| ImportError::Stat { errno })?;
        if !is_regular_file(&stat) {
            return Err(invalid(format!(
                "memmap path {path:?} is not a regular file"
            )));
        }
        check_own_user(&stat)
            .map_err(|other| ImportError::other_users(format!("memmap file {path:?}"), other))?;
        Ok((fd, stat))
    }
}

/// Whether `path` is absolute, valid UTF-8, and has no `.` or `..` parts.
fn is_plain_absolute(path: &Path) -> bool {
    let bytes = path.as_os_str().as_bytes();
    path.is_absolute()
        && path.to_str().is_some()
        && !bytes.contains(&0)
        && !bytes
            .split(|&b| b == b'/')
            .any(|part| part == b"." || part == b"..")
}

/// One file mapped in this process.
struct MappedFile {
    /// Dropped before `lease`: a file is unmapped here before it goes.
    mapping: SharedMapping,
    path: PathBuf,
    identity: FileIdentity,
    /// The file's removal, when this process created it.
    lease: Option<Arc<FileLease>>,
}

impl fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedFile")
            .field("path", &self.path)
            .field("len", &self.mapping.len())
            .field("identity", &self.identity)
            .field("lease", &self.lease)
            .finish()
    }
}

/// A file this process created, removed when the last holder of its lease
/// drops it (unless its strategy keeps files).
///
/// The segment over the file holds one lease; a sender keeps another for a
/// receiver that may map the file later, without keeping the segment: a
/// lease holds no fd and no mapping, only the file's path and identity.
/// The file is removed only while its path still names that very file
/// (`lstat` shows the same identity, and the file carries the tag written
/// on it at creation or, where the filesystem keeps no tag, `statx` shows
/// the same birth time), never a file put there since, even one given the
/// freed inode number in the same tick of the clock.
#[derive(Debug)]
pub struct FileLease {
    path: PathBuf,
    identity: FileIdentity,
    /// When the file was created, where the filesystem records it.
    born: Option<FileBirth>,
    /// The tag written on the file when it was created, where the
    /// filesystem keeps it: unlike the birth time, no later file shares it.
    tag: Option<CreationTag>,
    len: usize,
    remove: bool,
    /// Set once a message naming the file may still be opened when the
    /// last holder lets go: the file then stays.
    left_for_receivers: AtomicBool,
    /// The deadline last written as the file's mark, in seconds since the
    /// epoch ([`FileLease::await_receivers_until`]).
    marked_until: AtomicU64,
    /// The processes messages naming the file went to, as far as its
    /// sender could name them ([`FileLease::sent_to`]).
    recipients: SentTo,
}

/// A file's birth time (`statx`'s `stx_btime`): with the inode number it
/// tells a file from a later one that reuses the number, which filesystems
/// do as soon as a number is freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileBirth {
    seconds: i64,
    nanoseconds: u32,
}

impl FileBirth {
    /// The birth time in `statx`'s answer, if the filesystem gave one.
    fn recorded(statx: &Statx) -> Option<Self> {
        (statx.stx_mask & StatxFlags::BTIME.bits() != 0).then_some(FileBirth {
            seconds: statx.stx_btime.tv_sec,
            nanoseconds: statx.stx_btime.tv_nsec,
        })
    }
}

/// `statx` of what `path` names itself, not what a link there points to.
fn stamp(
    dir: impl AsFd,
    path: &Path,
    flags: AtFlags,
    mask: StatxFlags,
) -> rustix::io::Result<Statx> {
    statx(dir, path, flags | AtFlags::SYMLINK_NOFOLLOW, mask)
}

/// The identity of what `path` (from `dir`, with `flags`) names itself,
/// and its birth time: both from one `statx`, or, where `statx` is refused
/// (an old kernel, a seccomp filter), the identity alone from `fallback`.
fn identify(
    dir: impl AsFd,
    path: &Path,
    flags: AtFlags,
    fallback: impl FnOnce() -> nix::Result<FileStat>,
) -> nix::Result<(FileIdentity, Option<FileBirth>)> {
    match stamp(dir, path, flags, StatxFlags::INO | StatxFlags::BTIME) {
        Ok(now) => Ok((stamped_identity(&now), FileBirth::recorded(&now))),
        Err(_) => fallback().map(|stat| (FileIdentity::of(&stat), None)),
    }
}

/// `(st_dev, st_ino)` as `statx` gives them.
fn stamped_identity(statx: &Statx) -> FileIdentity {
    FileIdentity {
        dev: makedev(statx.stx_dev_major, statx.stx_dev_minor),
        ino: statx.stx_ino,
    }
}

impl FileLease {
    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `(st_dev, st_ino)` of the file.
    pub fn identity(&self) -> FileIdentity {
        self.identity
    }

    /// The file's size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the file is empty (never, for a file holding a storage).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether dropping the last holder removes the file (the strategy
    /// does not keep files, and the file was not
    /// [left for its receivers](Self::leave_for_receivers)).
    pub fn removes_file(&self) -> bool {
        self.remove && !self.left_for_receivers.load(Ordering::Acquire)
    }

    /// Notes that a message naming the file went to process `receiver`.
    pub fn sent_to(&self, receiver: u32) {
        self.recipients.add(receiver);
    }

    /// The processes messages naming the file went to, as now: once every
    /// one has exited ([`Recipients::all_exited`]), nobody is left to open
    /// it.
    pub fn recipients(&self) -> Recipients {
        self.recipients.recipients()
    }

    /// Keeps the file on disk when the last holder lets go: a receiver may
    /// still have to open it, and torch's `from_file` would make an empty
    /// file of zeros in its place. A file so left is reclaimed like the
    /// file of a process that was killed: by the sweep of the next sender
    /// in its directory and by `tensorshare gc`, once no process has it
    /// open or mapped ([`crate::services::orphans`]).
    pub fn leave_for_receivers(&self) {
        self.left_for_receivers.store(true, Ordering::Release);
    }

    /// Marks the file as named by a message that a receiver may not open
    /// before `until`: the sweep of the directory by another sender and
    /// `tensorshare gc` (unless told `--min-age 0`) keep it until then,
    /// even once this process is gone ([`crate::services::orphans`]), since
    /// torch's `from_file` would make a file of zeros in its place.
    ///
    /// The mark is the extended attribute
    /// `user.tensorshare.awaits_receivers_until`, the deadline in whole
    /// seconds since the epoch. It is written again only once the deadline
    /// has moved by a sixteenth of the time left to it, so that a stream of
    /// sends costs a write per file now and then; a mark may thus fall
    /// short of `until` by that much. A filesystem that keeps no user
    /// extended attributes keeps no mark, and its files are reclaimed by
    /// age alone.
    pub fn await_receivers_until(&self, until: SystemTime) {
        let seconds = |at: SystemTime| at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let (until, now) = (seconds(until), seconds(SystemTime::now()));
        let marked = self.marked_until.load(Ordering::Relaxed);
        let slack = (until.saturating_sub(now) / 16).max(1);
        if until < marked.saturating_add(slack) {
            return;
        }
        // Best effort, as documented: a file that cannot be marked is
        // reclaimed by age, as before marks existed.
        if memmap_marks::mark_awaits_receivers_until(&self.path, until) {
            self.marked_until.fetch_max(until, Ordering::Relaxed);
        }
    }
}

impl Drop for FileLease {
    fn drop(&mut self) {
        if !self.removes_file() {
            return;
        }
        // Removed only while the path still names this file: another
        // process may have replaced it. There is nothing to do about a
        // failure on a release path (already removed, directory gone).
        let Ok((identity, born)) =
            identify(CWD, &self.path, AtFlags::empty(), || lstat(&self.path))
        else {
            return;
        };
        let same_file = match self.tag {
            Some(tag) => memmap_marks::carries_tag(&self.path, tag),
            None => self.born.is_none() || born == self.born,
        };
        if identity == self.identity && same_file {
            let _ = unlink(&self.path);
        }
    }
}

/// A `memmap` file mapped in this process.
#[derive(Debug)]
pub struct MemmapSegment {
    file: MappedFile,
}

impl MemmapSegment {
    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    /// `(st_dev, st_ino)` of the file: equal in every process that maps it.
    pub fn identity(&self) -> FileIdentity {
        self.file.identity
    }

    /// Whether this process created the file and removes it when the last
    /// holder of its [`lease`](Self::lease) drops it.
    pub fn removes_file(&self) -> bool {
        self.file
            .lease
            .as_ref()
            .is_some_and(|lease| lease.removes_file())
    }

    /// The lease on the file's removal, for a file this process created
    /// (`None` for an imported one, which is never removed here).
    ///
    /// Holding a clone keeps the file on disk after the segment is dropped,
    /// without an fd or a mapping: what a sender keeps for a receiver that
    /// never says it mapped the file.
    pub fn lease(&self) -> Option<&Arc<FileLease>> {
        self.file.lease.as_ref()
    }

    /// Whether a process that received the file sent it on: `Some(true)`
    /// when one did, `Some(false)` when none did, `None` when the
    /// filesystem cannot tell (it keeps no user extended attributes).
    ///
    /// A process that sends on a file it did not create sets the extended
    /// attribute `user.tensorshare.sent_on` on it first
    /// ([`SharingStrategy::export`]): the file's creator counts only the
    /// messages it sent itself, and must not reuse a file whose receivers
    /// it does not know of.
    pub fn sent_on(&self) -> Option<bool> {
        memmap_marks::sent_on(&self.file.path)
    }

    /// Whether part of the segment was lost because another process
    /// truncated the file after it was mapped here.
    ///
    /// A page touched after it was lost is replaced, in this process only,
    /// by a page of zeros instead of killing the process with `SIGBUS`; from
    /// then on this returns `true`, and writes to such pages are not shared.
    /// Check it after reading a segment from a sender you do not control,
    /// and discard what you read when it is `true`.
    pub fn was_truncated(&self) -> bool {
        self.file.mapping.was_truncated()
    }
}

impl Segment for MemmapSegment {
    fn as_bytes(&self) -> &[u8] {
        self.file.mapping.as_slice()
    }

    fn kind(&self) -> StrategyKind {
        StrategyKind::Memmap
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl WritableSegment for MemmapSegment {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.file.mapping.as_mut_slice()
    }

    fn into_shared(self: Box<Self>) -> Arc<dyn Segment> {
        Arc::new(*self)
    }
}

/// What travels for a `memmap` segment: the file's path, and its identity
/// when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemmapHandle {
    path: PathBuf,
    identity: Option<FileIdentity>,
}

impl MemmapHandle {
    /// A handle for a path that arrived in a message; the import checks it.
    pub fn received(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            identity: None,
        }
    }

    /// A handle that must name the file with `identity`, as found by
    /// [`ReceivedFile::identity`]: a file put at the path since is refused.
    pub fn with_identity(mut self, identity: FileIdentity) -> Self {
        self.identity = Some(identity);
        self
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path as the `str` torch's `from_file` takes; files this crate
    /// creates always have one.
    pub fn path_str(&self) -> Option<&str> {
        self.path.to_str()
    }

    /// The file's identity, when the handle carries it.
    pub fn identity(&self) -> Option<FileIdentity> {
        self.identity
    }
}

impl SharingStrategy for MemmapStrategy {
    const KIND: StrategyKind = StrategyKind::Memmap;
    type Segment = MemmapSegment;
    type Handle = MemmapHandle;
    type Received = ReceivedFile;
    type Key = MemmapKey;
    type Dormant = Infallible;

    fn allocate(&self, nbytes: usize) -> Result<MemmapSegment, AllocateError> {
        if nbytes > MAX_SEGMENT_BYTES {
            return Err(AllocateError::TooLarge { nbytes });
        }
        let file_len = i64::try_from(nbytes).map_err(|_| AllocateError::TooLarge { nbytes })?;
        orphan_sweep::sweep_once(&self.dir);
        // The name tells `tensorshare gc` and later senders whether the file
        // is theirs to reclaim once this process is gone.
        let path = self.dir.join(if self.keep_files {
            MemmapFileName::fresh_kept()
        } else {
            MemmapFileName::fresh().file_name().to_owned()
        });
        let fd = open(
            &path,
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::S_IRUSR | Mode::S_IWUSR,
        )
        .map_err(|errno| match errno {
            Errno::EMFILE | Errno::ENFILE | Errno::ENOSPC => AllocateError::map(nbytes, errno),
            errno => AllocateError::CreateFile {
                dir: self.dir.display().to_string(),
                errno,
            },
        })?;
        // Removes the file on any error below.
        let created = CreatedFile(&path);
        ftruncate(&fd, file_len).map_err(|errno| AllocateError::resize(nbytes, errno))?;
        // Reserved, not populated as shared memory is: filesystems with
        // large folios fault a file in many pages at a time, which beats
        // populating it page by page.
        reserve(fd.as_fd(), file_len).map_err(|errno| AllocateError::resize(nbytes, errno))?;
        let (identity, born) = identify(&fd, Path::new(""), AtFlags::EMPTY_PATH, || fstat(&fd))
            .map_err(|errno| AllocateError::CreateFile {
                dir: self.dir.display().to_string(),
                errno,
            })?;
        let tag = memmap_marks::tag_created(&fd);
        // SAFETY: `ftruncate` just sized the file to `nbytes`; another
        // process that truncates it later is what the guard handles.
        let mapping = unsafe { SharedMapping::map_guarded(fd.as_fd(), nbytes) }
            .map_err(|errno| AllocateError::map(nbytes, errno))?;
        std::mem::forget(created);
        let lease = FileLease {
            path: path.clone(),
            identity,
            born,
            tag,
            len: nbytes,
            remove: !self.keep_files,
            left_for_receivers: AtomicBool::new(false),
            marked_until: AtomicU64::new(0),
            recipients: SentTo::default(),
        };
        Ok(MemmapSegment {
            file: MappedFile {
                mapping,
                identity,
                path,
                lease: Some(Arc::new(lease)),
            },
        })
    }

    /// A received file is marked as sent on first ([`MemmapSegment::sent_on`]).
    fn export(&self, segment: &MemmapSegment) -> Result<MemmapHandle, ExportError> {
        if segment.file.lease.is_none() {
            mark_sent_on(&segment.file.path)?;
        }
        Ok(MemmapHandle {
            path: segment.file.path.clone(),
            identity: Some(segment.file.identity),
        })
    }

    /// Checks the path (inside this strategy's directory, no symbolic
    /// link, a regular file of this user) and opens it; a handle that says
    /// which file it names must name the file found there.
    fn open(&self, handle: MemmapHandle) -> Result<ReceivedFile, ImportError> {
        let (fd, stat) = self.open_checked(&handle.path, 0)?;
        if handle
            .identity
            .is_some_and(|expected| expected != FileIdentity::of(&stat))
        {
            return Err(ImportError::InvalidHandle {
                reason: format!(
                    "memmap path {:?} names another file than the one identified",
                    handle.path
                ),
            });
        }
        Ok(ReceivedFile {
            file: ReceivedFd::with_stat(fd, stat),
            path: handle.path,
        })
    }

    fn map_received(
        &self,
        file: ReceivedFile,
        nbytes: usize,
        _dormant: Option<Infallible>,
    ) -> Result<MemmapSegment, ImportError> {
        if nbytes > MAX_SEGMENT_BYTES {
            return Err(ImportError::TooLarge { nbytes });
        }
        let ReceivedFile { file, path } = file;
        let (fd, stat) = file.into_parts();
        check_covers(&stat, 0, nbytes)?;
        // SAFETY: `fstat` just showed the file covers `nbytes`; a holder
        // that truncates it later is what the guard handles.
        let mapping = unsafe { SharedMapping::map_guarded(fd.as_fd(), nbytes) }
            .map_err(|errno| ImportError::from_map_errno(nbytes, errno))?;
        Ok(MemmapSegment {
            file: MappedFile {
                mapping,
                path,
                identity: FileIdentity::of(&stat),
                lease: None,
            },
        })
    }

    /// Files are mapped anew: filesystems with large folios fault a file in
    /// many pages at a time, so a kept mapping would save little.
    fn keep_dormant(&self, _segment: MemmapSegment) -> Option<Infallible> {
        None
    }

    fn received_key(file: &ReceivedFile) -> Option<MemmapKey> {
        Some((file.path.clone(), file.identity()))
    }

    fn segment_key(segment: &MemmapSegment) -> Option<MemmapKey> {
        Some((segment.file.path.clone(), segment.file.identity))
    }
}

/// Which file a memmap segment maps: its path and `(st_dev, st_ino)`, so
/// that neither a new file at the same path nor a hard link elsewhere
/// passes for the file mapped.
pub type MemmapKey = (PathBuf, FileIdentity);

/// A received file, opened and checked ([`SharingStrategy::open`]); the fd
/// is closed on drop, or once [`SharingStrategy::map_received`] has mapped it.
#[derive(Debug)]
pub struct ReceivedFile {
    file: ReceivedFd,
    path: PathBuf,
}

impl ReceivedFile {
    /// `(st_dev, st_ino)` of the file.
    pub fn identity(&self) -> FileIdentity {
        self.file.identity()
    }
}

/// Marks the file at `path` as sent on by a process that did not create it
/// ([`MemmapSegment::sent_on`]). A filesystem that keeps no user extended
/// attributes needs no mark: its files' creators cannot tell, and never
/// reuse them.
fn mark_sent_on(path: &Path) -> Result<(), ExportError> {
    memmap_marks::mark_sent_on(path).map_err(|errno| ExportError::MarkSentOn {
        errno: Errno::from_raw(errno.raw_os_error()),
    })
}

/// A file this process just created, removed if dropped before the segment
/// holding it is complete.
struct CreatedFile<'a>(&'a Path);

impl Drop for CreatedFile<'_> {
    fn drop(&mut self) {
        // Nothing more to do about a failure on this error path.
        let _ = unlink(self.0);
    }
}

/// Whether `name` is a file name this strategy creates.
pub fn is_memmap_file_name(name: &OsStr) -> bool {
    name.to_str()
        .is_some_and(|name| name.starts_with(FILE_PREFIX) && name.ends_with(FILE_SUFFIX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_names_are_ours_and_differ() {
        let (a, b) = (MemmapFileName::fresh(), MemmapFileName::fresh());
        assert_ne!(a, b);
        assert!(is_memmap_file_name(OsStr::new(a.file_name())));
        assert!(is_memmap_file_name(OsStr::new(
            &MemmapFileName::fresh_kept()
        )));
    }

    #[test]
    fn paths_must_be_plain_and_absolute() {
        assert!(is_plain_absolute(Path::new("/tmp/x")));
        for bad in ["tmp/x", "/tmp/../etc/passwd", "/tmp/./x", "./x", ""] {
            assert!(!is_plain_absolute(Path::new(bad)), "{bad}");
        }
    }
}
