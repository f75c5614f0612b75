//! [`SharingContext`]: the strategies joined with the registry, the
//! resource sharer and the other concerns of this layer, and each
//! strategy's wire form.

mod batch;
mod cache;
mod form;
mod network;
mod placed;
mod receipt;
mod receivers;
mod settings;
mod shares;

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use tensorshare_compat::pickle::{EncodeOptions, EncodedPickle, encode_vectored};
use tensorshare_strategies::file_descriptor::{FdBudget, FdSegment, FileDescriptorStrategy};
use tensorshare_strategies::memmap::MemmapStrategy;
use tensorshare_strategies::platform::fd_passing::MAX_FDS_PER_MESSAGE;
use tensorshare_strategies::services::shm_manager;
use tensorshare_strategies::{AllocateError, StrategyKind, WritableSegment};

use form::memmap::MemmapShares;
use form::{Reduced, TorchForm, WithStrategy, reduce_message};
use shares::SharesByKind;

pub(crate) use network::MessageOrigin;

use crate::Error;
use crate::connection::Authkey;
use crate::model::{Storage, StorageAllocator, StorageWriter, Value};
use crate::reduce::ReduceError;
use receivers::Receivers;
use settings::Settings;

use super::lifetimes::{DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, RetentionLimits};
use super::notices::Notices;
use super::placement::Placement;
use super::pools::Pools;

/// How long an fd handed to the resource sharer waits for its receiver.
///
/// torch keeps an unfetched `DupFd` until the process exits; a receiver that
/// never unpickles its message would leak it. Receivers fetch while
/// unpickling, within moments of receipt, so a generous deadline loses
/// nothing and bounds the fds a vanished peer can pin.
const DEFAULT_UNFETCHED_LIFETIME: Duration = Duration::from_secs(300);

/// Everything a process needs to send and receive tensors in torch's format.
///
/// One per process is typical (it owns the resource sharer that hands out
/// this process's fds). It is a handle: a clone is cheap and shares the
/// context, which lives until its last handle, and the last connection
/// made with it, go. A clone may be set up again (its own
/// [strategy](Self::with_strategy), say) and still share the resource
/// sharer, the pools and the caches.
///
/// # Examples
///
/// ```
/// use tensorshare::{Authkey, SharingContext, Tensor, Value};
///
/// let sharing = SharingContext::new(Authkey::new(b"secret".to_vec()));
/// // In this context's shared memory (file_system: a /dev/shm segment).
/// let t = Tensor::from_slice(&sharing, &[1i32, 2], &[2])?;
///
/// let bytes = sharing.dumps(&Value::from(vec![&t, &t]))?;
/// // Any process holding the same authkey rebuilds it, here this one:
/// let back = sharing.loads(&bytes)?;
/// let (first, second): (&Tensor, &Tensor) = (&back).try_into()?;
/// assert!(first.same_as(second), "one tensor sent twice is one tensor");
/// assert_eq!(first.as_slice::<i32>()?, [1, 2]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct SharingContext {
    /// How this handle sends and receives: plain values, which the `with_`
    /// methods set.
    settings: Settings,
    /// What this handle holds while it runs, apart from its other handles.
    held: HandleState,
    /// What every handle of the context shares.
    state: Arc<ContextState>,
}

/// What one handle holds while it runs: made anew by the `with_` method
/// that sets what it is made from, shared by the clones made since.
#[derive(Clone, Debug)]
struct HandleState {
    /// The fds received storages keep open: past it, a received storage
    /// keeps only its mapping, and is sent on as a copy.
    received_fds: FdBudget,
    /// The `memmap` strategy, which says where files are created and
    /// accepted from and whether they are kept, with the storages it sent
    /// and received and the pool of its directory's files.
    memmap: Arc<MemmapShares>,
}

/// The process's side of sharing, one per context whatever its handles.
#[derive(Debug)]
struct ContextState {
    authkey: Authkey,
    /// The resource sharer and the fds waiting in it for their receivers.
    receivers: Receivers,
    /// The storages each strategy sent and received by shared object: fd
    /// storages by inode, `file_system` ones by segment name (`memmap`'s
    /// are a handle's setting, as its directory is).
    shares: SharesByKind,
    /// The memory [`allocate`](SharingContext::allocate) hands out again.
    pools: Pools,
    /// Where the default puts each storage.
    placement: Placement,
    /// What the senders of the storages received here are told.
    notices: Notices,
}

impl SharingContext {
    /// A context with torch's default registry that places each storage
    /// where it works and runs fastest: a named segment while `/dev/shm`
    /// has room, a memfd past that, a small batch inline (the crate docs'
    /// [default strategy](crate#the-default-strategy) section has the rule
    /// and the measurements). [`with_strategy`](Self::with_strategy) names
    /// one strategy instead.
    ///
    /// `authkey` must equal the peers' `multiprocessing.current_process().authkey`
    /// (see [`connection`](crate::connection#agreeing-on-the-authkey)).
    pub fn new(authkey: Authkey) -> Self {
        let fd_limit = soft_fd_limit();
        let held = HandleState {
            received_fds: FdBudget::new((fd_limit / 8).max(16)),
            memmap: Arc::new(MemmapShares::new(
                MemmapStrategy::default(),
                RetentionLimits {
                    lifetime: DEFAULT_UNFETCHED_LIFETIME,
                    max_files: DEFAULT_MAX_FILES,
                    max_bytes: DEFAULT_MAX_BYTES,
                },
            )),
        };
        let state = ContextState {
            // Unfetched registrations hold an fd each: at least a few.
            receivers: Receivers::new(DEFAULT_UNFETCHED_LIFETIME, (fd_limit / 4).max(16)),
            shares: SharesByKind::default(),
            pools: Pools::new(fd_limit / 4),
            placement: Placement::probe(),
            notices: Notices::new(authkey.as_bytes()),
            authkey,
        };
        Self {
            settings: Settings::default(),
            held,
            state: Arc::new(state),
        }
    }

    /// Allocates `nbytes` zero-filled bytes to be written in place and
    /// shared with this context's strategy, as
    /// [`Storage::allocate`] does, reusing memory where it can; under the
    /// default, in a segment or a memfd as the
    /// [rule](crate#the-default-strategy) says, each reused as below.
    ///
    /// Under `memmap` the file is made in this context's
    /// [`memmap` directory](Self::with_memmap_dir).
    ///
    /// Under `file_descriptor` the memfd of a storage allocated here goes
    /// back to the context when the storage dies, and a later allocation of
    /// the same size takes it again once every process it was sent to has
    /// unmapped it: a tensorshare receiver reports that when its storage
    /// dies; a Python receiver never does, so a memfd it fetched is never
    /// reused. A stream of tensors then costs no new memfd, mapping or page
    /// per tensor. Free memfds are kept within the most bytes the producer
    /// held at once (at least 64 MiB, at most 1 GiB) and a quarter of the
    /// fd limit; one not reused for 10 seconds is freed by the next
    /// allocation, and all of them with the context.
    ///
    /// Under `file_system` the segment of a storage allocated here likewise
    /// goes back to the context when the storage dies, and a later
    /// allocation of the same size takes it again once the reference count
    /// in its header is back at this process's own: every receiver, torch's
    /// or ours, has let go of it, and no message naming it is waiting to be
    /// opened (each adds a count that only its receiver takes back; see the
    /// `pools::segments` module of the source for why that is enough). It
    /// stays registered with the shared-memory manager meanwhile, so a
    /// killed process still leaves nothing. Pooled segments are kept within
    /// the same byte bounds and at most 8192 of them (each is a mapping);
    /// one not taken within 10 seconds of its storage's end is let go of
    /// then, while the context idles too, and all of them with the context.
    ///
    /// Under `memmap` (unless the context keeps its files) the file of a
    /// storage allocated here is reused alike, within the same bounds, once
    /// the kernel has seen as many opens of it for writing let go of
    /// entirely (fd closed, mapping unmapped) as messages this context sent
    /// naming it: every receiver, torch's `from_file` too, opens the file
    /// once per message, so none maps it any more and none is still to open
    /// it (the `pools::memmap_files` module of the source says what this trusts).
    /// A file a receiver sent on is never reused: the receiver marks it
    /// with an extended attribute before sending it
    /// ([`MemmapSegment::sent_on`](tensorshare_strategies::memmap::MemmapSegment::sent_on)).
    /// The directory is watched with inotify; without it, every allocation
    /// makes a new file.
    ///
    /// # Errors
    ///
    /// As [`Storage::allocate`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare::{Authkey, SharingContext};
    ///
    /// let sharing = SharingContext::new(Authkey::new(b"secret".to_vec()));
    /// let mut writer = sharing.allocate(4096)?;
    /// assert!(writer.as_bytes_mut().iter().all(|&b| b == 0));
    /// writer.as_bytes_mut().fill(7);
    /// let first = writer.freeze();
    /// drop(first);
    /// // Never sent: its memory comes back at once, zeroed.
    /// let mut again = sharing.allocate(4096)?;
    /// assert!(again.as_bytes_mut().iter().all(|&b| b == 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn allocate(&self, nbytes: usize) -> Result<StorageWriter, AllocateError> {
        match self.settings.strategy {
            Some(kind) => self.allocate_with(kind, nbytes),
            None => self.allocate_placed(nbytes),
        }
    }

    /// Allocates as [`allocate`](Self::allocate) does under the strategy
    /// `kind`.
    fn allocate_with(
        &self,
        kind: StrategyKind,
        nbytes: usize,
    ) -> Result<StorageWriter, AllocateError> {
        struct Allocate(usize);
        impl WithStrategy for Allocate {
            type Output = Result<StorageWriter, AllocateError>;
            fn run<S: TorchForm>(self, context: &SharingContext) -> Self::Output {
                S::allocate_writer(context, self.0)
            }
        }
        self.using_strategy(kind, Allocate(nbytes))
    }

    /// Pickles `value` as torch's `ForkingPickler` would, sharing every
    /// storage with this context's strategy.
    ///
    /// # Errors
    ///
    /// When a storage cannot be shared (out of fds or memory, a storage whose
    /// bytes are not in this process) or the value has no pickled form.
    pub fn dumps(&self, value: &Value) -> Result<Vec<u8>, Error> {
        Ok(self.dumps_outgoing(value, false, None)?.pickle.into_vec())
    }

    /// Pickles `value` as [`dumps`](Self::dumps) does, keeping the storages
    /// whose fds may ride on the message; `over_tcp` for a message to a
    /// peer that may be on another host, whose storages go as bytes;
    /// `receiver`, the peer's pid when the connection can name it.
    pub(crate) fn dumps_outgoing(
        &self,
        value: &Value,
        over_tcp: bool,
        receiver: Option<u32>,
    ) -> Result<Outgoing, Error> {
        let Reduced {
            pickle,
            attachable: mut shared,
            protocol,
        } = reduce_message(self, self.strategy_for(over_tcp)?, value, receiver)?;
        let pickle = encode_vectored(&pickle, &EncodeOptions::new().with_protocol(protocol))?;
        let registered = shared.iter().map(|(key, _)| *key).collect();
        if !self.settings.inline_fds || shared.len() > MAX_FDS_PER_MESSAGE {
            shared.clear();
        }
        // In the order they were registered, so of ascending keys: the
        // receiver pairs them with the keys the message's DupFds name.
        Ok(Outgoing {
            pickle,
            attached: shared.into_iter().map(|(_, storage)| storage).collect(),
            registered,
        })
    }

    /// Stops handing out fds: closes every fd no receiver has fetched yet
    /// and removes the resource sharer's socket. Later sends of shared
    /// storages fail; storages already received stay mapped. The `memmap`
    /// files and `file_system` segments kept for reuse go too (a file
    /// removed, a segment unlinked once its receivers let go), but for the
    /// `memmap` files sent and not yet opened by every receiver, which stay
    /// for them (see [`wait_until_fetched`](Self::wait_until_fetched)), and so do
    /// the received segments kept mapped for their senders to send again,
    /// so that a process exiting next, with threads that still hold the
    /// context, leaves none of them.
    ///
    /// It also hands this process's `file_system` segments over to a live
    /// shared-memory manager if its own died, or is dying, and no
    /// replacement has taken over yet (see
    /// [`settle_own_manager`](tensorshare_strategies::services::shm_manager::settle_own_manager)),
    /// so that a process exiting next leaves none of them to nobody.
    /// Dropping the context does this too.
    pub fn shutdown(&self) {
        self.state.receivers.shutdown();
        self.memmap().clear();
        self.state.pools.clear();
        // No manager could be started: what it would have unlinked is left
        // to `tensorshare gc`, and this caller can do nothing better.
        let _ = shm_manager::settle_own_manager();
    }
}

/// Allocates as [`SharingContext::allocate`] does: with the context's
/// strategy, reusing memory where it can.
impl StorageAllocator for SharingContext {
    fn allocate_storage(&self, nbytes: usize) -> Result<StorageWriter, AllocateError> {
        self.allocate(nbytes)
    }

    fn allocate_hand_off(&self, nbytes: usize) -> Result<StorageWriter, AllocateError> {
        SharingContext::allocate_hand_off(self, nbytes)
    }
}

/// A context whose last handle is dropped is one whose process may exit
/// next: its segments go to a live manager first, as on
/// [`shutdown`](SharingContext::shutdown).
impl Drop for ContextState {
    fn drop(&mut self) {
        // As in `shutdown`: without a manager, what is left is gc's.
        let _ = shm_manager::settle_own_manager();
    }
}

/// The soft fd limit, which a context shares out: a quarter to free memfds
/// kept for reuse, a quarter to unfetched registrations, an eighth to
/// received storages; the rest is the embedder's.
fn soft_fd_limit() -> usize {
    use nix::sys::resource::{Resource, getrlimit};
    getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| {
        usize::try_from(soft).unwrap_or(usize::MAX)
    })
}

impl SharingContext {
    /// `storage` itself when it already lives in a segment of `S` that can
    /// be sent as it is, else its copy in one.
    ///
    /// The copy is made once per storage and kept while the storage lives
    /// ([`Storage::shared_twin`]), and sent again as long as it holds the
    /// storage's bytes. A storage in memory that other processes write (a
    /// received `file_descriptor` storage sent on as a `memmap` file) may
    /// have changed since: it then goes in a fresh copy.
    fn shared_copy<S: TorchForm>(&self, storage: &Storage) -> Result<Storage, Error> {
        let Some(kind) = storage.local_kind() else {
            return Err(not_in_process(storage));
        };
        if storage.exportable_kind() == Some(S::KIND) {
            return Ok(storage.clone());
        }
        let bytes = local_bytes(storage)?;
        let copy = || -> Result<Storage, Error> {
            let mut segment = S::shares(self).strategy.allocate(bytes.len())?;
            segment.as_bytes_mut().copy_from_slice(bytes);
            Ok(Storage::from_segment(Arc::new(segment)))
        };
        let twin = storage.shared_twin(S::KIND, copy)?;
        if !kind.shares_memory() || twin.bytes() == Some(bytes) {
            return Ok(twin);
        }
        copy()
    }
}

/// Why a storage whose bytes are elsewhere cannot be sent.
fn not_in_process(storage: &Storage) -> Error {
    ReduceError::NotInProcess {
        kind: storage.kind().name(),
    }
    .into()
}

/// The bytes of a storage held in this process, to be copied for sending.
fn local_bytes(storage: &Storage) -> Result<&[u8], Error> {
    storage.bytes().ok_or(ReduceError::ShortSegment.into())
}

/// A pickled message and the storages whose fds go with it, in the order
/// the receiver expects them.
pub(crate) struct Outgoing {
    pickle: EncodedPickle,
    attached: Vec<Storage>,
    /// The keys of the fds registered with the resource sharer for it.
    registered: Vec<i64>,
}

impl Outgoing {
    pub(crate) fn pickle(&self) -> &EncodedPickle {
        &self.pickle
    }

    /// The keys the message's `DupFd`s name, registered with this
    /// context's resource sharer.
    pub(crate) fn registered_keys(&self) -> &[i64] {
        &self.registered
    }

    /// The fds to attach: each storage's memfd, or none when one has no
    /// fd to give, since the receiver pairs them with the message's keys by
    /// their count.
    pub(crate) fn attached_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.attached
            .iter()
            .map(|storage| {
                storage
                    .segment_of::<FileDescriptorStrategy>()
                    .and_then(FdSegment::fd)
            })
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default()
    }
}
