//! Storages: the flat bytes behind tensors, local or described by a handle.

use std::fmt;
use std::sync::{Arc, OnceLock};

use tensorshare_compat::pickle::SharedBytes;
use tensorshare_strategies::bytes::BytesSegment;
use tensorshare_strategies::bytes::message_window::MessageWindow;
use tensorshare_strategies::{
    AllocateError, Segment, SharingStrategy, StrategyKind, WritableSegment,
};

/// Where a storage's bytes are, as `inspect` and the wire forms name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StorageKind {
    /// In a sharing strategy's memory, held in this process or named by
    /// the strategy's handle: `file_descriptor` (`rebuild_storage_fd`),
    /// `file_system` (`rebuild_storage_filename`), `bytes` (the bytes
    /// themselves: plain pickle, `torch.save`), `memmap` (a file on disk
    /// mapped by every holder).
    Strategy(StrategyKind),
    /// A storage of zero bytes (`rebuild_storage_empty`).
    Empty,
    /// A CUDA storage (`rebuild_cuda_tensor`); needs a GPU to attach.
    Cuda,
}

impl StorageKind {
    /// The name used on the command line and in `inspect --json`: the
    /// strategy's, `empty` or `cuda`.
    pub fn name(self) -> &'static str {
        match self {
            StorageKind::Strategy(kind) => kind.name(),
            StorageKind::Empty => "empty",
            StorageKind::Cuda => "cuda",
        }
    }
}

/// Where a storage held in this process lives: the strategy that made its
/// segment.
impl From<StrategyKind> for StorageKind {
    fn from(kind: StrategyKind) -> Self {
        StorageKind::Strategy(kind)
    }
}

impl fmt::Display for StorageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A `multiprocessing.resource_sharer.DupFd` reference: where to fetch an fd.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DupFdRef {
    /// The resource sharer's address: an `AF_UNIX` path, or an abstract name
    /// starting with NUL.
    pub address: Vec<u8>,
    /// The key the sharer registered the fd under.
    pub key: i64,
}

/// A torch `file_system` segment reference.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SegmentRef {
    /// The manager's socket path (`torch_shm_manager`), as sent.
    pub manager_handle: Vec<u8>,
    /// The shared-memory name, e.g. `/torch_1234_5678_0`.
    pub name: Vec<u8>,
}

/// A file-backed storage reference.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MemmapRef {
    /// The file's path.
    pub path: std::path::PathBuf,
}

/// A storage of a strategy torch has no form for, named by the handle its
/// strategy wrote: `tensorshare.rebuild_storage(strategy, handle,
/// nbytes)`. The strategy's form in the sharing layer reads the handle
/// when it attaches the storage.
#[derive(Clone, Debug)]
pub struct HandleRef {
    /// The strategy that wrote it.
    pub strategy: StrategyKind,
    /// What the strategy wrote to find its memory by, as it arrived.
    pub handle: super::Value,
}

/// The arguments of `rebuild_cuda_tensor`, decoded and kept to send on
/// unchanged; attaching needs a GPU, which this crate does not use.
#[derive(Clone, Debug, PartialEq)]
pub struct CudaRef {
    /// The CUDA device index.
    pub device: i64,
    /// The IPC memory handle bytes.
    pub(crate) handle: Vec<u8>,
    /// Byte offset of the storage inside the IPC allocation.
    pub(crate) storage_offset_bytes: i64,
    /// The producer's reference-counter file handle.
    pub(crate) ref_counter_handle: Vec<u8>,
    /// Offset of this storage's counter in that file.
    pub(crate) ref_counter_offset: i64,
    /// The CUDA event handle, if the producer sent one.
    pub(crate) event_handle: Option<Vec<u8>>,
    /// Whether the producer asked for a synchronizing event.
    pub(crate) event_sync_required: bool,
}

/// Where the bytes of a storage live.
#[derive(Clone, Debug)]
pub enum Residence {
    /// Mapped or held in this process.
    Local(Arc<dyn Segment>),
    /// Sent by fd; the fd has not been fetched.
    FileDescriptor(DupFdRef),
    /// A named shared-memory segment, not opened.
    FileSystem(SegmentRef),
    /// A file on disk, not mapped.
    Memmap(MemmapRef),
    /// On a GPU.
    Cuda(CudaRef),
    /// Elsewhere, in the memory of a strategy torch has no form for.
    Handle(HandleRef),
}

impl Residence {
    /// The strategy whose memory holds the bytes: the one that made a
    /// local segment, or whose handle describes memory elsewhere; `None`
    /// on a GPU.
    pub(crate) fn strategy(&self) -> Option<StrategyKind> {
        match self {
            Residence::Local(segment) => Some(segment.kind()),
            Residence::FileDescriptor(_) => Some(StrategyKind::FileDescriptor),
            Residence::FileSystem(_) => Some(StrategyKind::FileSystem),
            Residence::Memmap(_) => Some(StrategyKind::Memmap),
            Residence::Handle(handle) => Some(handle.strategy),
            Residence::Cuda(_) => None,
        }
    }
}

/// An untyped storage: `nbytes` bytes, local or described by a handle.
///
/// Cloning is cheap and keeps identity: two clones are the same storage, as
/// two Python references to one `UntypedStorage` are.
#[derive(Clone)]
pub struct Storage(Arc<StorageInner>);

#[derive(Debug)]
struct StorageInner {
    nbytes: usize,
    residence: Residence,
    /// This storage's bytes moved into shared memory for sending, made once
    /// and kept while this storage lives.
    shared_twin: OnceLock<Storage>,
    /// Where `torch.save` said the storage lived, for one read from an
    /// archive.
    saved_location: Option<Arc<str>>,
    /// The storage a received message's handle was attached as, once the
    /// message was rebuilt: this one then stands for it in everything.
    attached: OnceLock<Storage>,
}

/// `bytes` on the heap: the vector itself when they are all of one no one
/// else holds; the vector they are part of, shared, when they are most of
/// a large one (a received message's buffer: [`MessageWindow`]); else one
/// copy.
fn heap_segment(bytes: SharedBytes) -> Result<Arc<dyn Segment>, AllocateError> {
    match bytes.try_into_vec() {
        Ok(vec) => Ok(Arc::new(BytesSegment::from_vec(vec))),
        Err(shared) => match shared.try_into_shared_vec() {
            Ok((vec, range)) => MessageWindow::keep_or_copy(vec, range),
            Err(shared) => Ok(Arc::new(BytesSegment::copy_of(&shared)?)),
        },
    }
}

/// A storage's bytes as the owner of a [`SharedBytes`].
struct StorageBytes(Storage);

impl AsRef<[u8]> for StorageBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes().unwrap_or_default()
    }
}

/// A storage being filled by its producer: allocated directly in shared
/// memory (or on the heap for `bytes`), written in place, then frozen.
///
/// # Examples
///
/// Write it as bytes ([`as_bytes_mut`](Self::as_bytes_mut)) or as elements
/// ([`as_mut_slice`](Self::as_mut_slice)), then freeze it into a storage
/// ([`freeze`](Self::freeze)) or view it as a tensor
/// ([`into_tensor`](Self::into_tensor)).
///
/// ```
/// use tensorshare::StrategyKind;
/// use tensorshare::model::Storage;
///
/// let mut writer = Storage::allocate(StrategyKind::FileDescriptor, 4 * size_of::<f32>())?;
/// for (i, x) in writer.as_mut_slice::<f32>()?.iter_mut().enumerate() {
///     *x = i as f32;
/// }
/// let t = writer.into_tensor::<f32>(&[4])?;
/// assert_eq!(t.storage().kind().name(), "file_descriptor");
/// assert_eq!(t.as_slice::<f32>()?, [0.0, 1.0, 2.0, 3.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct StorageWriter(Box<dyn WritableSegment>);

impl StorageWriter {
    pub(crate) fn new(segment: Box<dyn WritableSegment>) -> Self {
        Self(segment)
    }

    /// The bytes, writable: nothing else in this process can see them yet.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.0.as_bytes_mut()
    }

    /// Ends writing; the storage can now be shared.
    pub fn freeze(self) -> Storage {
        Storage::from_segment(self.0.into_shared())
    }
}

impl fmt::Debug for StorageWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StorageWriter").field(&self.0).finish()
    }
}

/// Where new storages come from: a
/// [`SharingContext`](crate::SharingContext), which allocates with its
/// strategy and reuses memory, or a [`StrategyKind`], which makes a fresh
/// segment of that kind ([`Storage::allocate`]).
///
/// What [`Tensor::from_slice`](crate::Tensor::from_slice) and its likes
/// write into, so that a tensor built from Rust data is written once,
/// straight into the memory it is shared from.
///
/// # Examples
///
/// ```
/// use tensorshare::StrategyKind;
/// use tensorshare::model::StorageAllocator;
///
/// let mut writer = StrategyKind::Bytes.allocate_storage(16)?;
/// writer.as_bytes_mut()[0] = 1;
/// assert_eq!(writer.freeze().nbytes(), 16);
/// # Ok::<(), tensorshare::model::AllocateError>(())
/// ```
pub trait StorageAllocator {
    /// Allocates `nbytes` zero-filled bytes to be written in place.
    ///
    /// # Errors
    ///
    /// The strategy's [`AllocateError`]: out of memory, out of file
    /// descriptors, a full `/dev/shm`; each says what to do.
    fn allocate_storage(&self, nbytes: usize) -> Result<StorageWriter, AllocateError>;

    /// Allocates `nbytes` zero-filled bytes for a storage its sender hands
    /// off: written once, sent, and not looked at again, as a batch
    /// ([`BatchLayout::allocate`](crate::model::BatchLayout::allocate)).
    /// The same as [`allocate_storage`](Self::allocate_storage) but where
    /// the allocator says otherwise: a
    /// [`SharingContext`](crate::SharingContext) under its default puts a
    /// small one in this process's own memory, to travel inline.
    ///
    /// # Errors
    ///
    /// As [`allocate_storage`](Self::allocate_storage).
    fn allocate_hand_off(&self, nbytes: usize) -> Result<StorageWriter, AllocateError> {
        self.allocate_storage(nbytes)
    }
}

/// A fresh segment of this kind, as [`Storage::allocate`] makes it.
impl StorageAllocator for StrategyKind {
    fn allocate_storage(&self, nbytes: usize) -> Result<StorageWriter, AllocateError> {
        Storage::allocate(*self, nbytes)
    }
}

impl Storage {
    /// Allocates `nbytes` zero-filled bytes with the strategy `kind`, to be
    /// written in place.
    ///
    /// # Errors
    ///
    /// The strategy's [`AllocateError`]: out of memory, out of file
    /// descriptors, a full `/dev/shm`; each says what to do.
    ///
    /// # Examples
    ///
    /// A fresh memfd, written in place; a
    /// [`SharingContext`](crate::SharingContext) allocates with its own
    /// strategy and reuses memory ([`SharingContext::allocate`](crate::SharingContext::allocate)):
    ///
    /// ```
    /// use tensorshare::StrategyKind;
    /// use tensorshare::model::{Storage, StorageKind};
    ///
    /// let mut writer = Storage::allocate(StrategyKind::FileDescriptor, 4 * size_of::<f32>())?;
    /// writer.as_mut_slice::<f32>()?.copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);
    /// let storage = writer.freeze();
    /// assert_eq!((storage.nbytes(), storage.kind()), (16, StorageKind::Strategy(StrategyKind::FileDescriptor)));
    /// # Ok::<(), tensorshare::Error>(())
    /// ```
    pub fn allocate(kind: StrategyKind, nbytes: usize) -> Result<StorageWriter, AllocateError> {
        tensorshare_strategies::allocate_writable(kind, nbytes).map(StorageWriter)
    }

    /// A heap storage holding `bytes` (the `bytes` strategy's segment).
    pub fn from_vec(bytes: Vec<u8>) -> Self {
        Self::from_segment(Arc::new(BytesSegment::from_vec(bytes)))
    }

    /// A heap storage holding `bytes`: the vector itself when they are all
    /// of one no one else holds, else one copy (a received message's bytes,
    /// which the storage must not keep alive).
    ///
    /// # Errors
    ///
    /// [`AllocateError`] when the copy cannot be allocated.
    pub(crate) fn from_shared_bytes(bytes: SharedBytes) -> Result<Self, AllocateError> {
        Ok(Self::from_segment(heap_segment(bytes)?))
    }

    /// A heap storage read from a `torch.save` archive that says it was
    /// saved on `location` (`cpu`, `cuda:0`, `mps`, ...). Its bytes are
    /// here whatever the location, as `torch.load(map_location="cpu")`
    /// reads them.
    pub(crate) fn from_saved_bytes(
        bytes: SharedBytes,
        location: Arc<str>,
    ) -> Result<Self, AllocateError> {
        Ok(Self::from_saved_segment(heap_segment(bytes)?, location))
    }

    /// A storage over `segment`, read from a `torch.save` archive that says
    /// it was saved on `location` (a window of the mapped file, or bytes
    /// read out of it).
    pub(crate) fn from_saved_segment(segment: Arc<dyn Segment>, location: Arc<str>) -> Self {
        Self::new(segment.len(), Residence::Local(segment), Some(location))
    }

    /// A storage over a local segment, covering all of it.
    pub fn from_segment(segment: Arc<dyn Segment>) -> Self {
        Self::new(segment.len(), Residence::Local(segment), None)
    }

    /// A storage described by a handle whose bytes are elsewhere.
    pub fn remote(residence: Residence, nbytes: usize) -> Self {
        Self::new(nbytes, residence, None)
    }

    fn new(nbytes: usize, residence: Residence, saved_location: Option<Arc<str>>) -> Self {
        Self(Arc::new(StorageInner {
            nbytes,
            residence,
            shared_twin: OnceLock::new(),
            saved_location,
            attached: OnceLock::new(),
        }))
    }

    /// The storage this one stands for: itself, or the storage its handle
    /// was attached as (a storage of this process, never one described by
    /// a handle itself).
    fn target(&self) -> &Storage {
        self.0.attached.get().unwrap_or(self)
    }

    fn inner(&self) -> &StorageInner {
        &self.target().0
    }

    /// Makes this storage, described by a handle a received message gave,
    /// stand for `attached`, the storage the handle names in this process:
    /// every clone of it, in whatever the message's value holds, then
    /// reads `attached`'s bytes and is the same storage as it. A storage
    /// is attached once; `Err` gives `attached` back after that.
    pub(crate) fn attach(&self, attached: Storage) -> Result<(), Storage> {
        self.0.attached.set(attached)
    }

    /// Where the storage was when `torch.save` wrote it (`cpu`, `cuda:0`,
    /// `mps`, ...), for one read from a `torch.save` archive; its bytes are
    /// in this process whatever the location. `None` for any other storage.
    pub fn saved_location(&self) -> Option<&str> {
        self.inner().saved_location.as_deref()
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> usize {
        self.inner().nbytes
    }

    /// Where the bytes are.
    pub fn residence(&self) -> &Residence {
        &self.inner().residence
    }

    /// What kind of storage this is, as `inspect` reports it.
    pub fn kind(&self) -> StorageKind {
        let inner = self.inner();
        if inner.nbytes == 0 {
            return StorageKind::Empty;
        }
        inner
            .residence
            .strategy()
            .map_or(StorageKind::Cuda, StorageKind::from)
    }

    /// The bytes, when they are in this process.
    pub fn bytes(&self) -> Option<&[u8]> {
        let inner = self.inner();
        match &inner.residence {
            Residence::Local(segment) => segment.as_bytes().get(..inner.nbytes),
            _ => None,
        }
    }

    /// The bytes, as [`bytes`](Self::bytes) gives them, held by a
    /// [`SharedBytes`] that keeps this storage alive: a pickle refers to
    /// them instead of copying them.
    pub(crate) fn shared_bytes(&self) -> Option<SharedBytes> {
        self.bytes()?;
        Some(SharedBytes::from_owner(StorageBytes(self.clone())))
    }

    /// Whether two handles are the same storage (Python's `is`).
    pub fn same_as(&self, other: &Storage) -> bool {
        Arc::ptr_eq(&self.target().0, &other.target().0)
    }

    /// A reference that does not keep the storage alive.
    pub(crate) fn downgrade(&self) -> WeakStorage {
        WeakStorage(Arc::downgrade(&self.target().0))
    }

    /// The segment holding the bytes, when they are in this process in a
    /// segment of type `T` (an `FdSegment`, a `FileSystemSegment`, ...).
    pub fn local_segment<T: Segment>(&self) -> Option<&T> {
        match &self.inner().residence {
            Residence::Local(segment) => segment.downcast_ref::<T>(),
            _ => None,
        }
    }

    /// The segment of strategy `S` this storage maps, if it maps one: what
    /// the runtime exports.
    pub(crate) fn segment_of<S: SharingStrategy>(&self) -> Option<&S::Segment> {
        match &self.inner().residence {
            Residence::Local(segment) => S::local(segment.as_ref()),
            _ => None,
        }
    }

    /// The strategy of the segment holding the bytes, when they are here.
    pub fn local_kind(&self) -> Option<StrategyKind> {
        match &self.inner().residence {
            Residence::Local(segment) => Some(segment.kind()),
            _ => None,
        }
    }

    /// The strategy that can send the segment holding the bytes as it is:
    /// [`local_kind`](Self::local_kind), unless the segment cannot be
    /// exported (a received fd segment that closed its fd to stay within
    /// the fd budget), so that sending it makes a copy.
    pub(crate) fn exportable_kind(&self) -> Option<StrategyKind> {
        match &self.inner().residence {
            Residence::Local(segment) if segment.can_export() => Some(segment.kind()),
            _ => None,
        }
    }

    /// This storage's copy in shared memory of `kind`, made by `make` the
    /// first time and then kept as long as this storage lives: torch's
    /// `share_memory_()`, which moves a storage into shared memory in place,
    /// so that one storage sent many times is one segment.
    ///
    /// A storage keeps one such copy; asked for another kind, it makes an
    /// uncached one.
    pub(crate) fn shared_twin<E>(
        &self,
        kind: StrategyKind,
        make: impl FnOnce() -> Result<Storage, E>,
    ) -> Result<Storage, E> {
        let of_kind = |twin: &&Storage| twin.local_kind() == Some(kind);
        if let Some(twin) = self.inner().shared_twin.get().filter(of_kind) {
            return Ok(twin.clone());
        }
        let made = make()?;
        // Two threads may race here: both copy, the first stored is the
        // one every sender uses.
        let twin = self.inner().shared_twin.get_or_init(|| made.clone());
        Ok(if of_kind(&twin) { twin.clone() } else { made })
    }

    /// A key that is equal for clones of one storage and different otherwise,
    /// for maps that track identity (memo tables, `inspect` ids).
    pub fn identity(&self) -> usize {
        Arc::as_ptr(&self.target().0) as *const () as usize
    }
}

/// A [`Storage`] reference that does not keep it alive (for caches).
#[derive(Clone, Debug)]
pub struct WeakStorage(std::sync::Weak<StorageInner>);

impl WeakStorage {
    /// The storage, if something still holds it.
    pub fn upgrade(&self) -> Option<Storage> {
        self.0.upgrade().map(Storage)
    }

    /// Whether something still holds the storage.
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Storage")
            .field("kind", &self.kind())
            .field("nbytes", &self.nbytes())
            .finish()
    }
}
