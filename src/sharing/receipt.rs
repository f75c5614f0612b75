//! One received message being rebuilt: the context that attaches its
//! storages, and the fds that arrived attached to it.
//!
//! A tensorshare sender attaches the fd of every storage it shares to the
//! message itself, in ascending key order, and registers each with its
//! resource sharer as torch does (a Python receiver never sees the attached
//! fds and fetches). The receiver pairs the fds with the message's `DupFd`s
//! by sorted key, maps them without a round trip, and gives the keys back to
//! the sender's sharer ([`Releases`](super::release::Releases)) so that it
//! closes its copies. If anything about the pairing is off (another count,
//! several sharers, a repeated key) the attached fds are closed and every
//! storage is fetched as from torch; an attached fd that does not map as the
//! storage (not shared memory, too small) is closed and that storage
//! fetched. The sender chooses the bytes either way: an attached fd is
//! trusted exactly as far as the sharer the same sender names.

use std::cell::RefCell;
use std::os::fd::OwnedFd;

use tensorshare_compat::pickle::Global;

use super::{MessageOrigin, SharingContext, SharingError};
use crate::model::{DupFdRef, SegmentRef, Storage, Value};
use crate::registry::attach::{AttachError, StorageAttacher};
use crate::registry::rebuild::Walker;

/// A message's storages being attached through `context`.
pub(crate) struct Receipt<'a> {
    context: &'a SharingContext,
    attached: Option<AttachedFds>,
    origin: MessageOrigin,
}

/// Fds that arrived with a message, each with the key of the `DupFd` it
/// stands for, by ascending key; an fd is taken out when its storage maps.
struct AttachedFds {
    address: Vec<u8>,
    by_key: RefCell<Vec<(i64, Option<OwnedFd>)>>,
}

impl AttachedFds {
    /// The fd that came for `key`, if it is still here.
    fn take(&self, key: i64) -> Option<OwnedFd> {
        let mut by_key = self.by_key.borrow_mut();
        let index = by_key.binary_search_by_key(&key, |(k, _)| *k).ok()?;
        by_key.get_mut(index)?.1.take()
    }

    /// The sender's sharer and every key that came with an fd, used or
    /// not: what to give back.
    fn into_release(self) -> (Vec<u8>, Vec<i64>) {
        let keys = self.by_key.into_inner().into_iter().map(|(key, _)| key);
        (self.address, keys.collect())
    }
}

impl<'a> Receipt<'a> {
    /// A receipt for the pickle `walker` is about to rebuild, which arrived
    /// with `fds`; the walker finds the message's `DupFd`s first.
    pub(crate) fn new(
        context: &'a SharingContext,
        walker: &mut Walker<'_>,
        fds: Vec<OwnedFd>,
        origin: MessageOrigin,
    ) -> Self {
        let attached = if fds.is_empty() {
            None
        } else {
            attached_fds(walker, fds)
        };
        Self {
            context,
            attached,
            origin,
        }
    }

    /// The storage a `DupFd` names, `nbytes` long: mapped from the attached
    /// fd when one came for it, else fetched from the sender's sharer.
    fn fd(&self, dup_fd: &DupFdRef, nbytes: usize) -> Result<Storage, SharingError> {
        self.origin.admit_shared_memory("rebuild_storage_fd")?;
        let attached = self
            .attached
            .as_ref()
            .filter(|attached| attached.address == dup_fd.address)
            .and_then(|attached| attached.take(dup_fd.key));
        // An attached fd that cannot be what the DupFd names (not shared
        // memory, too small, not writable) is not trusted over the sharer.
        if let Some(Ok(storage)) = attached.map(|fd| self.context.map_fd(fd, nbytes, Some(dup_fd)))
        {
            return Ok(storage);
        }
        let fd = super::resource_sharer::fetch_fd(
            &dup_fd.address,
            dup_fd.key,
            self.context.authkey().as_bytes(),
            self.context.fetch_timeout,
        )?;
        self.context.map_fd(fd, nbytes, None)
    }
}

/// Each failure goes through the registry as this layer's own error, which
/// [`SharingError::from_rebuild`] takes back.
impl StorageAttacher for Receipt<'_> {
    fn attach_fd(&self, dup_fd: &DupFdRef, nbytes: usize) -> Result<Storage, AttachError> {
        self.fd(dup_fd, nbytes).map_err(AttachError::new)
    }

    fn attach_segment(&self, segment: &SegmentRef, nbytes: usize) -> Result<Storage, AttachError> {
        let origin = self.origin.admit_shared_memory("rebuild_storage_filename");
        (origin.and_then(|()| self.context.map_segment(segment, nbytes))).map_err(AttachError::new)
    }

    fn attach_file(&self, path: &str, nbytes: usize) -> Result<Storage, AttachError> {
        let origin = self
            .origin
            .admit_shared_memory("UntypedStorage.from_file (memmap)");
        (origin.and_then(|()| self.context.map_file(path, nbytes))).map_err(AttachError::new)
    }
}

impl std::fmt::Debug for Receipt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receipt")
            .field(
                "attached",
                &self.attached.as_ref().map(|a| a.by_key.borrow().len()),
            )
            .finish_non_exhaustive()
    }
}

impl Drop for Receipt<'_> {
    /// Gives every attached key back, used or not: the fds arrived, so the
    /// sender's copies are no longer needed, whatever became of the rebuild.
    fn drop(&mut self) {
        if let Some(attached) = self.attached.take() {
            let (address, keys) = attached.into_release();
            self.context.releases.release(address, keys);
        }
    }
}

/// Pairs `fds` with the `DupFd`s of the pickle `walker` is about to
/// rebuild; the `DupFd` descriptions it builds for this are kept for the
/// rebuild, since they hold no storage.
fn attached_fds(walker: &mut Walker<'_>, fds: Vec<OwnedFd>) -> Option<AttachedFds> {
    let dup_fd = Global::new("multiprocessing.resource_sharer", "DupFd");
    let built = walker.objects_built_by(&dup_fd).ok()?;
    let dup_fds: Option<Vec<&DupFdRef>> = built.iter().map(|(_, value)| dup_fd_of(value)).collect();
    let attached = dup_fds.and_then(|dup_fds| pair(&dup_fds, fds));
    for (id, value) in built {
        if dup_fd_of(&value).is_some() {
            walker.keep_built(id, value);
        }
    }
    attached
}

/// The `DupFd` description `value` is, if it is one.
fn dup_fd_of(value: &Value) -> Option<&DupFdRef> {
    match value {
        Value::Custom(custom) => custom.value.downcast_ref::<DupFdRef>(),
        _ => None,
    }
}

/// Pairs `fds` with the `DupFd`s of a message by ascending key, the order
/// the sender attached them in; `None` (closing the fds) unless every
/// `DupFd` names the same sharer, no key repeats, and the counts agree.
fn pair(dup_fds: &[&DupFdRef], fds: Vec<OwnedFd>) -> Option<AttachedFds> {
    let address = dup_fds.first()?.address.clone();
    if dup_fds.len() != fds.len() || dup_fds.iter().any(|d| d.address != address) {
        return None;
    }
    let mut keys: Vec<i64> = dup_fds.iter().map(|d| d.key).collect();
    keys.sort_unstable();
    if keys.windows(2).any(|pair| pair[0] == pair[1]) {
        return None;
    }
    let by_key = keys.into_iter().zip(fds.into_iter().map(Some)).collect();
    Some(AttachedFds {
        address,
        by_key: RefCell::new(by_key),
    })
}
