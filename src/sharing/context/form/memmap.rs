//! The `memmap` strategy in a form stock torch rebuilds by itself: a
//! storage lives in a file that both sides map shared, and the message
//! carries the file's path and size as the call
//!
//! ```text
//! builtins.getattr(torch._C.StorageBase, 'from_file')(path, True, nbytes)
//! ```
//!
//! which is what `pickle` writes for `torch.UntypedStorage.from_file(path,
//! shared=True, nbytes=nbytes)`: torch maps the file `MAP_SHARED` and
//! returns an `UntypedStorage` over it. The storage is then wrapped by
//! `rebuild_typed_storage` and `rebuild_tensor` as under every strategy.
//!
//! Receiving accepts `builtins.getattr` only as that exact call (the
//! registry's rebuilders) and a file only inside this process's memmap directory
//! ([`MemmapStrategy`] checks the path, refuses symbolic links, files of
//! other users and files smaller than the message says).
//!
//! torch has no way to tell a sender that it mapped a file, so a sender
//! keeps each file it sent (its lease: no fd, no mapping, not the storage
//! it was copied from) for the context's unfetched lifetime
//! ([`SharingContext::with_unfetched_lifetime`]) after its last send, and
//! at most [`SharingContext::with_max_held_memmap_files`] files and
//! [`SharingContext::with_max_held_memmap_bytes`] bytes of them, the oldest
//! going first; [`SharingContext::shutdown`] and dropping the context let
//! go of all, but for the files a message may still be on its way to,
//! which stay for their receivers. A file is removed once it is let go of
//! and no storage of this process maps it, unless the context keeps files
//! ([`SharingContext::with_memmap_keep_files`]). A torch receiver that maps
//! it later gets a file of zeros made in its place (`from_file` opens with
//! `O_CREAT`); a tensorshare receiver refuses the missing file.
//!
//! A file [`SharingContext::allocate`] made comes back to the context when
//! its storage dies, and is allocated again once every message that named
//! it was opened and let go of (the `pools::memmap_files` module of the
//! source).

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use tensorshare_compat::pickle::{Node, NodeId};
use tensorshare_strategies::memmap::{MemmapHandle, MemmapSegment, MemmapStrategy};
use tensorshare_strategies::{AllocateError, SharingStrategy};

use super::{MessageParts, NamedHandle, TorchForm, not_a_handle};
use crate::Error;
use crate::model::{Residence, Storage, StorageWriter};
use crate::reduce::ReduceError;
use crate::registry::memmap::{FROM_FILE, GETATTR, STORAGE_BASE};
use crate::sharing::context::SharingContext;
use crate::sharing::context::shares::Shares;
use crate::sharing::lifetimes::{RetentionLimits, SentFiles};
use crate::sharing::pools::{self, MemmapPool, Pool};
use tensorshare_compat::pickle::PickleBuilder;

impl TorchForm for MemmapStrategy {
    const REBUILDER: &'static str = "UntypedStorage.from_file (memmap)";
    const HOLDER: &'static str = "memmap file";

    /// A handle's own: its directory is a setting of the handle.
    fn shares(context: &SharingContext) -> &Shares<Self> {
        &context.memmap().shares
    }

    /// A file from the context's pool when one of `nbytes` is free (every
    /// message that named it was opened and let go of: see the
    /// `pools::memmap_files` module of the source), zeroed; else a new one,
    /// which the pool watches from then on. Either way it goes back to the
    /// pool when the storage dies here. A context that keeps its files
    /// makes a new one every time.
    fn allocate_writer(
        context: &SharingContext,
        nbytes: usize,
    ) -> Result<StorageWriter, AllocateError> {
        let memmap = context.memmap();
        let strategy = &memmap.shares.strategy;
        if strategy.keeps_files() {
            return Ok(StorageWriter::new(Box::new(strategy.allocate(nbytes)?)));
        }
        pools::allocate(&memmap.pool, strategy, nbytes)
    }

    /// Maps `nbytes` of the file a message names, once per file while it
    /// lives.
    fn attach(context: &SharingContext, named: NamedHandle<'_>) -> Result<Storage, Error> {
        let Residence::Memmap(file) = named.remote else {
            return Err(not_a_handle::<Self>(named.remote));
        };
        Self::shares(context).receive_plain(MemmapHandle::received(file.path.clone()), named.nbytes)
    }

    /// Storages travel as `getattr(torch._C.StorageBase, 'from_file')(path,
    /// True, nbytes)`, each in a file of the context's directory.
    fn write_handle(
        context: &SharingContext,
        storage: &Storage,
        segment: &MemmapSegment,
        out: &mut PickleBuilder,
        message: &MessageParts,
    ) -> Result<NodeId, Error> {
        let memmap = context.memmap();
        let handle = memmap.shares.strategy.export(segment)?;
        let path = handle
            .path_str()
            .ok_or_else(|| ReduceError::PathNotUtf8(handle.path().to_path_buf()))?;
        memmap.hold_sent_file(segment, message.receiver);

        let getattr = out.global(GETATTR.0, GETATTR.1);
        let class = out.global(STORAGE_BASE.0, STORAGE_BASE.1);
        let attribute = out.push(Node::Str(FROM_FILE.to_string()));
        let from_file = out.call(getattr, vec![class, attribute]);
        let path = out.push(Node::Str(path.to_string()));
        let shared_flag = out.push(Node::Bool(true));
        let nbytes = out.int(storage.nbytes());
        Ok(out.call(from_file, vec![path, shared_flag, nbytes]))
    }
}

/// The `memmap` strategy of a context's handles: the storages it sent and
/// received, the pool of its directory's files and the files sent and
/// kept for their receivers. Handles that share a directory share one;
/// a handle given another directory, or told to keep its files, gets its
/// own.
#[derive(Debug)]
pub(in crate::sharing::context) struct MemmapShares {
    shares: Shares<MemmapStrategy>,
    pool: Arc<MemmapPool>,
    /// The leases of the files sent, kept within their bounds: torch tells
    /// no sender that it mapped a file.
    pub(in crate::sharing::context) sent_files: SentFiles,
}

impl MemmapShares {
    pub(in crate::sharing::context) fn new(
        strategy: MemmapStrategy,
        limits: RetentionLimits,
    ) -> Self {
        Self {
            pool: pools::memmap_pool(strategy.dir()),
            shares: Shares::new(strategy),
            sent_files: SentFiles::new(limits),
        }
    }

    /// The same bounds over `strategy`, with nothing sent or pooled yet.
    fn renewed(&self, strategy: MemmapStrategy) -> Self {
        Self::new(strategy, self.sent_files.limits())
    }

    /// Keeps the file of `segment` on disk for its receivers, which never
    /// say they mapped it, without keeping the segment, or the storage it
    /// was copied from: only its lease. A file this process did not create
    /// (a received one sent on) is its creator's to keep.
    ///
    /// The file is also marked as awaited by a receiver for as long
    /// ([`FileLease::await_receivers_until`](tensorshare_strategies::memmap::FileLease::await_receivers_until)), so that no other sender's
    /// sweep of the directory, nor `tensorshare gc`, takes it from a
    /// receiver still to open it should this process be killed.
    fn hold_sent_file(&self, segment: &MemmapSegment, recipient: Option<u32>) {
        if let Some(lease) = segment.lease() {
            if let Some(pid) = recipient {
                lease.sent_to(pid);
            }
            lease.await_receivers_until(SystemTime::now() + self.sent_files.lifetime());
            self.sent_files.hold(Arc::clone(lease));
        }
        self.pool.sent(segment);
    }

    /// How many files sent and kept for their receivers are still to be
    /// opened by at least one of them, as far as the kernel's open events
    /// tell; files whose opens cannot be counted are not waited for.
    pub(in crate::sharing::context) fn unopened_sent_files(&self) -> usize {
        let leases = self.sent_files.awaited_leases();
        self.pool
            .all_opened(leases.iter().map(|lease| lease.path()))
            .into_iter()
            .filter(|all| *all == Some(false))
            .count()
    }

    /// Leaves on disk, past this process, every sent file whose messages
    /// may not all have been opened yet: a receiver that opens it later
    /// finds it, where torch's `from_file` would otherwise make an empty
    /// file of zeros. They are reclaimed as a killed sender's files are
    /// ([`FileLease::leave_for_receivers`](tensorshare_strategies::memmap::FileLease::leave_for_receivers)).
    fn leave_unopened_sent_files(&self) {
        let leases = self.sent_files.awaited_leases();
        let opened = self
            .pool
            .all_opened(leases.iter().map(|lease| lease.path()));
        for (lease, all) in leases.iter().zip(opened) {
            if all != Some(true) {
                lease.leave_for_receivers();
            }
        }
    }

    /// Lets go of the files kept, as the context's shutdown does: but for
    /// those a message may still be on its way to.
    pub(in crate::sharing::context) fn clear(&self) {
        self.leave_unopened_sent_files();
        self.sent_files.clear();
        self.pool.make_room();
    }
}

/// Handles dropped with their context, whose process may exit next: the
/// files sent and not yet opened stay for their receivers.
impl Drop for MemmapShares {
    fn drop(&mut self) {
        self.leave_unopened_sent_files();
    }
}

impl SharingContext {
    /// This handle's `memmap` strategy, with what it sent and received.
    pub(in crate::sharing::context) fn memmap(&self) -> &MemmapShares {
        &self.held.memmap
    }

    /// Creates memmap files in, and accepts them only from, `dir` (default:
    /// `$TMPDIR`, or `/tmp`).
    ///
    /// Set on a clone, it is that handle's: its files are pooled and kept
    /// for their receivers apart from the other handles'.
    ///
    /// # Errors
    ///
    /// [`Error::MemmapDir`] when `dir` is not an existing directory with a
    /// UTF-8 path.
    pub fn with_memmap_dir(mut self, dir: impl AsRef<Path>) -> Result<Self, Error> {
        let memmap = self.memmap();
        let strategy = MemmapStrategy::in_dir(dir)
            .map_err(Error::MemmapDir)?
            .keep_files(memmap.shares.strategy.keeps_files());
        self.held.memmap = Arc::new(memmap.renewed(strategy));
        Ok(self)
    }

    /// Keeps the memmap files this context creates after their last holder
    /// drops them (default: they are removed).
    pub fn with_memmap_keep_files(mut self, keep: bool) -> Self {
        let memmap = self.memmap();
        let strategy = memmap.shares.strategy.clone().keep_files(keep);
        self.held.memmap = Arc::new(memmap.renewed(strategy));
        self
    }

    /// Keeps at most `max` sent files for their receivers (default 4096),
    /// letting go of the oldest first; the file of the latest send is
    /// always kept; each also goes at the
    /// [unfetched lifetime](Self::with_unfetched_lifetime) after its last
    /// send. A torch receiver that maps a file let go of gets zeros (its
    /// `from_file` makes the file anew), a tensorshare one an error.
    pub fn with_max_held_memmap_files(self, max: usize) -> Self {
        self.memmap()
            .sent_files
            .update_limits(|limits| limits.max_files = max);
        self
    }

    /// Keeps at most `max` bytes of sent files for their receivers (default
    /// 1 GiB), letting go of the oldest first; the file of the latest send
    /// is always kept, whatever its size.
    pub fn with_max_held_memmap_bytes(self, max: usize) -> Self {
        self.memmap()
            .sent_files
            .update_limits(|limits| limits.max_bytes = max);
        self
    }

    /// How many memmap files this context keeps on disk for receivers that
    /// may still map them: files it created and sent within the unfetched
    /// lifetime and the bounds. A file also stays while a storage of this
    /// process maps it, whether or not it is counted here.
    pub fn held_memmap_files(&self) -> usize {
        self.memmap().sent_files.held().0
    }
}
