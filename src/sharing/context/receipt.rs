//! One received message being rebuilt: the context that attaches its
//! storages, and the fds that arrived attached to it.
//!
//! A tensorshare sender attaches the fd of every storage it shares to the
//! message itself, in the order it registered them with its resource
//! sharer, as torch does, so in ascending key order; it attaches all of
//! them or none (a Python receiver never sees the attached fds and
//! fetches). The receiver pairs them by what the message says, not by
//! walking it as the sender did: when the message's `DupFd`s name one
//! sharer and as many distinct keys as fds arrived, the smallest key takes
//! the first fd, and so on; each `DupFd` the rebuild meets takes its key's
//! fd, mapped without a round trip, and every key whose fd arrived goes
//! back to the sender's sharer (the `notices` module) so that it closes
//! its copy. When the counts differ, no fd is paired: they are closed and
//! every storage is fetched as from torch. An attached fd that does not
//! map as its storage (not shared memory, too small) is closed and that
//! storage fetched. The sender chooses the bytes either way: an attached
//! fd is trusted exactly as far as the sharer the same sender names.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::OwnedFd;

use tensorshare_compat::pickle::Pickle;

use super::{MessageOrigin, SharingContext};
use crate::Error;
use crate::model::{DupFdRef, SegmentRef, Storage};
use crate::registry::attach::{AttachFailed, StorageAttacher};
use crate::registry::dup_fd_ids;

/// A message's storages being attached through `context`.
pub(crate) struct Receipt<'a> {
    context: &'a SharingContext,
    attached: RefCell<AttachedFds>,
    origin: MessageOrigin,
}

/// Fds that arrived with a message, each for the key it was registered
/// under.
#[derive(Default)]
struct AttachedFds {
    /// The sharer every `DupFd` of the message names.
    sharer: Option<Vec<u8>>,
    /// The fds not yet taken, by key.
    unpaired: BTreeMap<i64, OwnedFd>,
    /// The keys whose fds arrived: what to give back.
    keys: Vec<i64>,
}

impl AttachedFds {
    /// `fds` paired with the keys `pickle`'s `DupFd`s name, when those name
    /// one sharer and as many distinct keys as there are fds; else none
    /// (the fds close here).
    fn new(fds: Vec<OwnedFd>, pickle: &Pickle) -> Self {
        if fds.is_empty() {
            return Self::default();
        }
        let ids = dup_fd_ids(pickle);
        let Some(sharer) = ids.first().map(|id| id.address.clone()) else {
            return Self::default();
        };
        if ids.iter().any(|id| id.address != sharer) {
            return Self::default();
        }
        let keys: BTreeSet<i64> = ids.iter().map(|id| id.key).collect();
        if keys.len() != fds.len() {
            return Self::default();
        }
        Self {
            sharer: Some(sharer),
            unpaired: keys.iter().copied().zip(fds).collect(),
            keys: keys.into_iter().collect(),
        }
    }

    /// The fd that came for `dup_fd`, if one did.
    fn pair(&mut self, dup_fd: &DupFdRef) -> Option<OwnedFd> {
        if self.sharer.as_deref() != Some(&dup_fd.address[..]) {
            return None;
        }
        self.unpaired.remove(&dup_fd.key)
    }
}

/// `result`, its error carried up through the rebuild, which ends with it
/// as [`Error::Attach`]'s cause.
fn carried(result: Result<Storage, Error>) -> Result<Storage, AttachFailed> {
    result.map_err(|cause| AttachFailed(Box::new(cause)))
}

impl<'a> Receipt<'a> {
    /// A receipt for `pickle`, a message of `origin` that arrived with
    /// `fds`.
    pub(crate) fn new(
        context: &'a SharingContext,
        pickle: &Pickle,
        fds: Vec<OwnedFd>,
        origin: MessageOrigin,
    ) -> Self {
        Self {
            context,
            attached: RefCell::new(AttachedFds::new(fds, pickle)),
            origin,
        }
    }

    /// The storage a `DupFd` names, `nbytes` long: mapped from the attached
    /// fd when one came for it, else fetched from the sender's sharer.
    fn fd(&self, dup_fd: &DupFdRef, nbytes: usize) -> Result<Storage, Error> {
        self.origin.admit_shared_memory("rebuild_storage_fd")?;
        let attached = self.attached.borrow_mut().pair(dup_fd);
        // An attached fd that cannot be what the DupFd names (not shared
        // memory, too small, not writable) is not trusted over the sharer.
        if let Some(Ok(storage)) = attached.map(|fd| self.context.map_fd(fd, nbytes, Some(dup_fd)))
        {
            return Ok(storage);
        }
        let fd = crate::resource_sharer::fetch_fd(
            &dup_fd.address,
            dup_fd.key,
            self.context.authkey().as_bytes(),
            self.context.settings.fetch_timeout,
        )?;
        self.context.map_fd(fd, nbytes, None)
    }
}

impl StorageAttacher for Receipt<'_> {
    fn attach_fd(&self, dup_fd: &DupFdRef, nbytes: usize) -> Result<Storage, AttachFailed> {
        carried(self.fd(dup_fd, nbytes))
    }

    fn attach_segment(&self, segment: &SegmentRef, nbytes: usize) -> Result<Storage, AttachFailed> {
        let origin = self.origin.admit_shared_memory("rebuild_storage_filename");
        carried(origin.and_then(|()| self.context.map_segment(segment, nbytes)))
    }

    fn attach_file(&self, path: &str, nbytes: usize) -> Result<Storage, AttachFailed> {
        let origin = self
            .origin
            .admit_shared_memory("UntypedStorage.from_file (memmap)");
        carried(origin.and_then(|()| self.context.map_file(path, nbytes)))
    }
}

impl std::fmt::Debug for Receipt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let attached = self.attached.borrow();
        f.debug_struct("Receipt")
            .field("paired", &attached.keys.len())
            .field("unpaired", &attached.unpaired.len())
            .finish_non_exhaustive()
    }
}

impl Drop for Receipt<'_> {
    /// Gives every key whose fd arrived back, mapped or not: the sender's
    /// copies are no longer needed, whatever became of the rebuild. An fd
    /// no `DupFd` took is closed here, its key given back all the same.
    /// Fds that could not be paired give back nothing: their keys go to
    /// the fetches, or to the sender's deadline for unfetched fds.
    fn drop(&mut self) {
        let attached = self.attached.take();
        if let Some(sharer) = attached.sharer {
            self.context.state.notices.release(sharer, attached.keys);
        }
    }
}
