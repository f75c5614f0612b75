//! The `file_system` strategy: named POSIX shared-memory segments with
//! torch's reference-count header.
//!
//! A segment is `/dev/shm/torch_<pid>_<random>_<counter>`, mode 0600, of
//! `nbytes + 64` bytes: the first 64 bytes hold a native `i32` reference
//! count that every holder updates atomically (torch's `MapInfo`), the data
//! starts at byte 64. The protocol is torch's `RefcountedMapAllocator` and
//! `reduce_storage` / `rebuild_storage_filename`, so Rust and torch holders
//! of one segment count together:
//!
//! - the creator makes it with a count of 1 and registers it with its
//!   shared-memory manager ([`crate::services::shm_manager`]);
//! - every message that carries it adds one for the message in flight
//!   ([`SharingStrategy::export`]);
//! - a receiver opens it, adds one for itself, registers it with the
//!   manager the message names, then takes away the one of the message
//!   ([`SharingStrategy::import`]);
//! - each holder takes away its own when it drops the segment, and the one
//!   that brings the count to 0 unlinks the name.
//!
//! The manager is the safety net: a separate process that every holder is
//! connected to, which unlinks what a crashed process can no longer count
//! down.
//!
//! Unlike the `file_descriptor` strategy, a mapped segment holds no fd: the
//! name is opened, mapped and closed again, so sharing many storages never
//! runs out of fds.
//!
//! # Shrinking
//!
//! A named segment cannot be sealed: any process that can open the name may
//! truncate it after this process mapped it. Every mapping of a segment is
//! therefore registered with the crate's fault guard: a page lost that way
//! reads as zeros instead of killing this process with `SIGBUS`, and
//! [`FileSystemSegment::was_truncated`] tells. Only processes of the same
//! user can open a segment (mode 0600, unguessable name), the same trust
//! torch places in them.
//!
//! # Whose segments are imported
//!
//! Only this process's effective user's. A message may name any object in
//! `/dev/shm`, and root can open every one of them; import opens the name,
//! checks with `fstat` on that fd that this user owns it, and refuses
//! another user's segment ([`ImportError::OtherUsersObject`], naming the
//! owner) before mapping it, counting in its header or registering it, so
//! the refused segment is left exactly as it was.
//!
//! # Safety
//!
//! This module opts in to `unsafe` to map segments and to write their data
//! through `SharedMapping::tail_mut` (the private `mapping` module):
//!
//! - a segment is mapped, with `SharedMapping::map_guarded`, only after
//!   `ftruncate` sized it (creation) or `fstat` showed that it covers the
//!   mapping (import);
//! - the data bytes after the header are written only through
//!   `&mut FileSystemSegment`, the one owner of that range in this process;
//!   handles and the reference count touch the header only.
#![allow(unsafe_code)]

use std::any::Any;
use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::mman::{shm_open, shm_unlink};
use nix::sys::stat::{Mode, fstat, lstat};
use nix::sys::statvfs::statvfs;
use nix::unistd::ftruncate;

pub use crate::platform::segment_name::{InvalidSegmentName, MAX_SEGMENT_NAME_LEN, SegmentName};
pub use dormant::DormantSegment;

mod dormant;

use crate::platform::segment_name::SHM_DIR;

use crate::platform::mapping::{SharedMapping, is_regular_file, reserve};
use crate::platform::owner::check_own_user;
use crate::platform::process::{SentTo, has_exited};
use crate::services::shm_manager::{self, ManagerConnection, ManagerError, ManagerHandle};
use crate::strategy::error::{MAX_SEGMENT_BYTES, check_covers};
use crate::strategy::file_descriptor::FileIdentity;
use crate::{
    AllocateError, ExportError, ImportError, Segment, SharingStrategy, StrategyKind,
    WritableSegment,
};

/// Bytes before the data: torch's `map_alloc_alignment`, whose first four
/// hold the reference count.
pub const HEADER_BYTES: usize = 64;

/// The `file_system` strategy: segments registered with a shared-memory
/// manager.
///
/// [`FileSystemStrategy::default`] uses this process's own manager, started
/// as a daemon on first allocation ([`shm_manager::own_manager`]);
/// [`with_manager`](Self::with_manager) uses a given one.
///
/// # Examples
///
/// ```no_run
/// use tensorshare_strategies::file_system::FileSystemStrategy;
/// use tensorshare_strategies::{Segment, SharingStrategy, WritableSegment};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let strategy = FileSystemStrategy::default();
/// let mut segment = strategy.allocate(5)?;
/// segment.as_bytes_mut().copy_from_slice(b"hello");
///
/// // What travels: the manager's socket path and the segment's name.
/// let (manager, name) = strategy.export(&segment)?.into_parts();
/// println!("{} via {:?}", name, manager.path());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct FileSystemStrategy {
    manager: Option<Arc<ManagerConnection>>,
}

impl FileSystemStrategy {
    /// A strategy that registers the segments it creates with `manager`.
    pub fn with_manager(manager: Arc<ManagerConnection>) -> Self {
        Self {
            manager: Some(manager),
        }
    }

    fn manager(&self) -> Result<Arc<ManagerConnection>, AllocateError> {
        match &self.manager {
            Some(manager) => Ok(Arc::clone(manager)),
            None => shm_manager::own_manager().map_err(AllocateError::Manager),
        }
    }
}

/// One process's mapping of a named segment: header and data.
///
/// Dropping it takes this holder's count away (if it still holds one),
/// unlinks the name if that was the last, unmaps, and tells the manager.
#[derive(Debug)]
struct MappedObject {
    /// Unmapped by `drop` before the manager is told.
    mapping: ManuallyDrop<SharedMapping>,
    name: SegmentName,
    identity: FileIdentity,
    manager: Arc<ManagerConnection>,
    /// Whether one count of the header is this holder's: not while the
    /// mapping is [dormant](DormantSegment).
    holds_count: bool,
    /// The processes this process sent messages naming it to.
    recipients: SentTo,
}

impl MappedObject {
    fn refcount(&self) -> &AtomicI32 {
        // SAFETY: this module reads and writes a segment's bytes from
        // `HEADER_BYTES` on only (`tail`, `tail_mut`); the header's count is
        // touched as this atomic alone.
        let count = unsafe { self.mapping.head_atomic_i32() };
        count.expect("a segment mapping holds at least its header")
    }

    fn incref(&self) {
        self.refcount().fetch_add(1, Ordering::AcqRel);
    }

    /// Takes one count away; unlinks the name when it reaches 0 and still
    /// names this segment. Returns whether it reached 0.
    fn decref(&self) -> bool {
        let last = self.refcount().fetch_sub(1, Ordering::AcqRel) == 1;
        if last {
            unlink_if_same(&self.name, self.identity);
        }
        last
    }
}

impl Drop for MappedObject {
    fn drop(&mut self) {
        let freed = self.holds_count && self.decref();
        // Unmapped before the manager hears of it: a manager that then
        // finds nothing mapping a segment whose receivers have all exited
        // unlinks it at once, where a mapping still here would make it wait
        // a grace period.
        // SAFETY: `mapping` is dropped once, here, and nothing reads it
        // after: this is the object's end, and no other field's drop
        // touches it.
        unsafe { ManuallyDrop::drop(&mut self.mapping) };
        if freed {
            self.manager.unregister(&self.name);
        } else {
            self.manager.unregister_in_use(&self.name);
        }
    }
}

/// A `file_system` segment mapped in this process.
#[derive(Debug)]
pub struct FileSystemSegment {
    object: Arc<MappedObject>,
}

impl FileSystemSegment {
    /// The segment's name, e.g. `/torch_1234_987654321_0`.
    pub fn name(&self) -> &SegmentName {
        &self.object.name
    }

    /// Tells the manager the segment is registered with that a message
    /// naming it is on its way to process `receiver`: once `receiver` has
    /// exited, the count that message added no longer keeps the segment
    /// (the manager's in-flight notices; only this crate's manager is
    /// told).
    pub fn sent_to(&self, receiver: u32) {
        self.object.recipients.add(receiver);
        self.object.manager.in_flight(&self.object.name, receiver);
    }

    /// Whether its count holds more than this process's own hold while
    /// every process this process sent it to ([`sent_to`](Self::sent_to))
    /// has exited: a message one of them never read, or a hold one of them
    /// never let go of, counts for nobody, and the count will not come
    /// back down.
    pub fn is_stranded(&self) -> bool {
        self.is_stranded_by(&mut has_exited)
    }

    /// [`is_stranded`](Self::is_stranded), asking `exited` whether each
    /// process it went to has exited: for a caller looking at many
    /// segments, which asks once per pid.
    pub fn is_stranded_by(&self, exited: &mut dyn FnMut(u32) -> bool) -> bool {
        let own = i32::from(self.object.holds_count);
        self.refcount() > own && self.object.recipients.all_exited_by(exited)
    }

    /// The manager this process registered the segment with (or the one
    /// that took over from it: see [`ManagerConnection`]); a message that
    /// carries the segment names it so that receivers register there.
    pub fn manager(&self) -> ManagerHandle {
        self.object.manager.handle()
    }

    /// `(st_dev, st_ino)` of the segment: equal in every process that maps it.
    pub fn identity(&self) -> FileIdentity {
        self.object.identity
    }

    /// The reference count in the segment's header: how many holders and
    /// messages in flight the segment has, across processes.
    pub fn refcount(&self) -> i32 {
        self.object.refcount().load(Ordering::Acquire)
    }

    /// Whether part of the segment was lost because another process
    /// truncated the named object after it was mapped here.
    ///
    /// A named segment cannot be sealed (see the module's
    /// [Shrinking](crate::strategy::file_system#shrinking) section): a page of it
    /// touched after it was lost is replaced, in this process only, by a page
    /// of zeros instead of killing the process with `SIGBUS`. From then on
    /// this returns `true`: the bytes past the object's new end read as zeros
    /// here (the reference count too, when the header was lost), and writes
    /// to them are not shared with any other process. Check it after reading
    /// a segment from a sender you do not control, and discard what you read
    /// when it is `true`.
    ///
    /// It also turns `true` when shared memory (`/dev/shm`) ran out as a page
    /// of a segment with unallocated pages was first touched (segments this
    /// crate creates have all their pages allocated): that page reads as
    /// zeros alike.
    pub fn was_truncated(&self) -> bool {
        self.object.mapping.was_truncated()
    }

    /// Takes back the count a message added for a segment this process
    /// already holds: what a receiver does when the same segment arrives
    /// again while it is still mapped (torch's `storage_from_cache` then
    /// `_shared_decref`).
    ///
    /// # Errors
    ///
    /// [`ImportError::InvalidHandle`] when `handle` names another segment;
    /// nothing is counted then.
    pub fn absorb(&self, handle: SegmentHandle) -> Result<(), ImportError> {
        if handle.name != self.object.name {
            return Err(ImportError::InvalidHandle {
                reason: format!(
                    "handle {} does not name segment {}",
                    handle.name, self.object.name
                ),
            });
        }
        self.object.decref();
        handle.in_flight.delivered();
        Ok(())
    }
}

impl Segment for FileSystemSegment {
    fn as_bytes(&self) -> &[u8] {
        self.object.mapping.tail(HEADER_BYTES)
    }

    fn kind(&self) -> StrategyKind {
        StrategyKind::FileSystem
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl WritableSegment for FileSystemSegment {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the data range is borrowed only through this segment
        // (`as_bytes` / `as_bytes_mut`), and `&mut self` makes this the only
        // borrow of it; other clones of the `Arc` (handles) touch the header
        // only.
        unsafe { self.object.mapping.tail_mut(HEADER_BYTES) }
    }

    fn into_shared(self: Box<Self>) -> Arc<dyn Segment> {
        Arc::new(*self)
    }
}

/// What travels for a `file_system` segment: the manager's socket path and
/// the segment's name, with the count the sender added for this message.
///
/// Dropping a handle that was neither [imported](SharingStrategy::import)
/// nor [sent](SegmentHandle::into_parts) takes its count back.
#[derive(Debug)]
pub struct SegmentHandle {
    manager: ManagerHandle,
    name: SegmentName,
    in_flight: InFlightCount,
}

/// The count a sender added for a message, given back on drop unless it
/// was delivered. Only an exported handle can give it back; one that
/// arrived from elsewhere leaves that to its receiver's import.
#[derive(Debug)]
struct InFlightCount(Option<Arc<MappedObject>>);

impl InFlightCount {
    fn delivered(mut self) {
        self.0 = None;
    }
}

impl Drop for InFlightCount {
    fn drop(&mut self) {
        if let Some(object) = self.0.take() {
            object.decref();
        }
    }
}

impl SegmentHandle {
    /// A handle that arrived in a message: the count for it was added by
    /// its sender, and the receiver's import takes it back.
    pub fn received(manager: ManagerHandle, name: SegmentName) -> Self {
        Self {
            manager,
            name,
            in_flight: InFlightCount(None),
        }
    }

    /// The segment's name.
    pub fn name(&self) -> &SegmentName {
        &self.name
    }

    /// The manager receivers register the segment with.
    pub fn manager(&self) -> &ManagerHandle {
        &self.manager
    }

    /// The manager and name to put in a message. The message now owns the
    /// count added for it: the receiver takes it back.
    pub fn into_parts(self) -> (ManagerHandle, SegmentName) {
        let SegmentHandle {
            manager,
            name,
            in_flight,
        } = self;
        in_flight.delivered();
        (manager, name)
    }
}

impl SharingStrategy for FileSystemStrategy {
    const KIND: StrategyKind = StrategyKind::FileSystem;
    type Segment = FileSystemSegment;
    type Handle = SegmentHandle;
    /// The name is all there is to open before mapping.
    type Received = SegmentHandle;
    type Key = SegmentName;
    /// A received segment's mapping and registration, its count given back.
    type Dormant = DormantSegment;

    fn allocate(&self, nbytes: usize) -> Result<FileSystemSegment, AllocateError> {
        let total = mapped_len(nbytes).ok_or(AllocateError::TooLarge { nbytes })?;
        let file_len = i64::try_from(total).map_err(|_| AllocateError::TooLarge { nbytes })?;
        let manager = self.manager()?;
        // Registered before it exists, so that no moment passes in which
        // this process could die and leave the name to nobody.
        let name = SegmentName::fresh();
        manager.register(&name).map_err(AllocateError::Manager)?;
        let fd = shm_open(
            name.as_str(),
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR,
            Mode::S_IRUSR | Mode::S_IWUSR,
        )
        .map_err(|errno| {
            manager.unregister(&name);
            AllocateError::create_object(nbytes, errno)
        })?;
        let created = CreatedName {
            name: &name,
            manager: &manager,
        };
        ftruncate(&fd, file_len).map_err(|errno| AllocateError::resize(nbytes, errno))?;
        reserve(fd.as_fd(), file_len).map_err(|errno| match errno {
            Errno::ENOSPC | Errno::ENOMEM => shm_full(nbytes),
            errno => AllocateError::Resize { nbytes, errno },
        })?;
        // SAFETY: `ftruncate` just sized the object to `total` bytes; once
        // the name is sent, a receiver could truncate it, which the guard
        // handles.
        let mapping = unsafe { SharedMapping::map_guarded(fd.as_fd(), total) }
            .map_err(|errno| AllocateError::map(nbytes, errno))?;
        let stat = fstat(&fd).map_err(|errno| AllocateError::CreateObject { errno })?;
        std::mem::forget(created);
        drop(fd);
        let object = MappedObject {
            mapping: ManuallyDrop::new(mapping),
            name,
            identity: FileIdentity::of(&stat),
            manager,
            holds_count: true,
            recipients: SentTo::default(),
        };
        object.refcount().store(1, Ordering::Release);
        Ok(FileSystemSegment {
            object: Arc::new(object),
        })
    }

    fn export(&self, segment: &FileSystemSegment) -> Result<SegmentHandle, ExportError> {
        segment.object.incref();
        Ok(SegmentHandle {
            manager: segment.manager(),
            name: segment.name().clone(),
            in_flight: InFlightCount(Some(Arc::clone(&segment.object))),
        })
    }

    fn open(&self, handle: SegmentHandle) -> Result<SegmentHandle, ImportError> {
        Ok(handle)
    }

    /// Takes back the count the message added (see
    /// [`FileSystemSegment::absorb`]).
    fn join_held(
        &self,
        held: &FileSystemSegment,
        handle: SegmentHandle,
    ) -> Result<(), ImportError> {
        held.absorb(handle)
    }

    /// Gives the segment's count back and keeps its mapping and its
    /// registration, unless it was the last holder (the name is unlinked
    /// then), a handle still refers to it, or it was truncated.
    fn keep_dormant(&self, segment: FileSystemSegment) -> Option<DormantSegment> {
        DormantSegment::keep(Arc::try_unwrap(segment.object).ok()?)
    }

    fn received_key(handle: &SegmentHandle) -> Option<SegmentName> {
        Some(handle.name.clone())
    }

    fn segment_key(segment: &FileSystemSegment) -> Option<SegmentName> {
        Some(segment.name().clone())
    }

    /// Opens the name and checks what it names; takes `dormant` when it is
    /// a mapping of that object, of that length, registered with the
    /// manager the message names, instead of mapping and registering anew.
    fn map_received(
        &self,
        handle: SegmentHandle,
        nbytes: usize,
        dormant: Option<DormantSegment>,
    ) -> Result<FileSystemSegment, ImportError> {
        if nbytes > MAX_SEGMENT_BYTES {
            return Err(ImportError::TooLarge { nbytes });
        }
        let SegmentHandle {
            manager: manager_handle,
            name,
            in_flight,
        } = handle;
        let fd = open_existing(&name, nbytes)?;
        let stat = fstat(&fd).map_err(|errno| ImportError::Stat { errno })?;
        if !is_regular_file(&stat) {
            return Err(ImportError::InvalidHandle {
                reason: format!("{name} is not a shared-memory file"),
            });
        }
        // Before anything is mapped or counted: the header of another
        // user's segment is not this process's to touch, root or not.
        check_own_user(&stat).map_err(|other| {
            ImportError::other_users(format!("shared-memory segment {name}"), other)
        })?;
        check_covers(&stat, HEADER_BYTES as u64, nbytes)?;
        let total = mapped_len(nbytes).ok_or(ImportError::TooLarge { nbytes })?;
        let identity = FileIdentity::of(&stat);
        if let Some(object) =
            dormant.and_then(|dormant| dormant.wake(identity, total, &manager_handle))
        {
            drop(fd);
            return Ok(counted_in(object, in_flight));
        }
        // SAFETY: `fstat` just showed the object covers `total` bytes; a
        // holder that truncates it later is what the guard handles.
        let mapping = unsafe { SharedMapping::map_guarded(fd.as_fd(), total) }
            .map_err(|errno| ImportError::from_map_errno(nbytes, errno))?;
        drop(fd);
        // Registered before this process counts itself, so that a refused
        // import leaves the header as it found it; the message's count stays
        // for its sender's manager.
        let manager =
            register_received(&manager_handle, &name).map_err(|cause| ImportError::Manager {
                name: name.to_string(),
                cause,
            })?;
        let object = MappedObject {
            mapping: ManuallyDrop::new(mapping),
            name,
            identity,
            manager,
            holds_count: false,
            recipients: SentTo::default(),
        };
        Ok(counted_in(object, in_flight))
    }
}

/// A received segment, mapped and registered: this process counts itself
/// in its header and takes back the count its message carried.
fn counted_in(mut object: MappedObject, in_flight: InFlightCount) -> FileSystemSegment {
    object.incref();
    object.holds_count = true;
    // The message's count: this process now holds the segment in its stead.
    object.decref();
    in_flight.delivered();
    FileSystemSegment {
        object: Arc::new(object),
    }
}

/// Registers a received segment with the manager its message names, and
/// returns that manager's connection.
///
/// When nothing listens there any more (the manager died; its creator may
/// have taken over with a new one, or died too), the segment is registered
/// with this process's own manager instead, so that some manager still
/// unlinks it once its holders are gone: a manager never unlinks a segment
/// a process still maps, so splitting its holders between managers cannot
/// pull it from under one of them.
fn register_received(
    handle: &ManagerHandle,
    name: &SegmentName,
) -> Result<Arc<ManagerConnection>, ManagerError> {
    let named = shm_manager::connect(handle).and_then(|manager| match manager.register(name) {
        Ok(()) => Ok(manager),
        Err(cause) => {
            // The manager may have taken the name with its reply lost.
            manager.unregister(name);
            Err(cause)
        }
    });
    match named {
        Err(cause) if manager_is_gone(&cause) => {
            let own = shm_manager::own_manager()?;
            own.register(name).inspect_err(|_| own.unregister(name))?;
            Ok(own)
        }
        named => named,
    }
}

/// Whether `error` says nothing serves the manager's socket any more, as
/// opposed to another user's manager or one that answers wrongly.
fn manager_is_gone(error: &ManagerError) -> bool {
    match error {
        ManagerError::Connect { errno, .. } => matches!(errno, Errno::ENOENT | Errno::ECONNREFUSED),
        ManagerError::Closed { .. } | ManagerError::Broken { .. } => true,
        ManagerError::Send { errno, .. } => matches!(errno, Errno::EPIPE | Errno::ECONNRESET),
        _ => false,
    }
}

/// `nbytes` plus the header, if a mapping can hold it.
fn mapped_len(nbytes: usize) -> Option<usize> {
    nbytes
        .checked_add(HEADER_BYTES)
        .filter(|&total| total <= MAX_SEGMENT_BYTES)
}

/// A segment this process created and registered, not yet complete:
/// dropped on an error, it unlinks the name and tells the manager.
struct CreatedName<'a> {
    name: &'a SegmentName,
    manager: &'a ManagerConnection,
}

impl Drop for CreatedName<'_> {
    fn drop(&mut self) {
        // Nothing more to do about a failure on this error path.
        let _ = shm_unlink(self.name.as_str());
        self.manager.unregister(self.name);
    }
}

/// Unlinks `name` if it still names the segment with `identity`: someone
/// may have unlinked it already (the manager, `gc`) and another user put an
/// object of their own under the name, which is not this process's to
/// remove even as root. The sticky `/dev/shm` keeps other users from
/// swapping the name between the check and the unlink.
fn unlink_if_same(name: &SegmentName, identity: FileIdentity) {
    match lstat(&name.shm_path()) {
        Ok(stat) if FileIdentity::of(&stat) == identity => {
            // There is nothing to do about a failure in a release path.
            let _ = shm_unlink(name.as_str());
        }
        // Gone already, or another object now: left alone.
        _ => {}
    }
}

/// Opens an existing segment read-write.
fn open_existing(name: &SegmentName, nbytes: usize) -> Result<OwnedFd, ImportError> {
    shm_open(name.as_str(), OFlag::O_RDWR, Mode::empty()).map_err(|errno| match errno {
        Errno::ENOENT => ImportError::SegmentMissing {
            name: name.to_string(),
        },
        errno => ImportError::from_map_errno(nbytes, errno),
    })
}

/// The error for a `/dev/shm` that cannot hold `nbytes` more, with its size.
fn shm_full(nbytes: usize) -> AllocateError {
    let ShmRoom { size, available } = ShmRoom::now().unwrap_or_default();
    AllocateError::SharedMemoryFull {
        nbytes,
        mount: SHM_DIR.to_string(),
        size,
        available,
    }
}

/// The size and the free bytes of `/dev/shm`, where segments are made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShmRoom {
    /// The mount's size in bytes.
    pub size: u64,
    /// The bytes an unprivileged process may still allocate in it.
    pub available: u64,
}

impl ShmRoom {
    /// `/dev/shm`'s room now; `None` when it cannot be read (no such
    /// mount).
    pub fn now() -> Option<Self> {
        let stats = statvfs(SHM_DIR).ok()?;
        let block = stats.fragment_size();
        Some(Self {
            size: stats.blocks().saturating_mul(block),
            available: stats.blocks_available().saturating_mul(block),
        })
    }

    /// The bytes a segment holding `nbytes` takes from the mount: the data
    /// and its header.
    pub fn cost(nbytes: usize) -> u64 {
        u64::try_from(nbytes.saturating_add(HEADER_BYTES)).unwrap_or(u64::MAX)
    }
}
