//! One received message being rebuilt: the context that attaches its
//! storages, and the fds that arrived attached to it.
//!
//! A tensorshare sender attaches the fd of every storage it shares to the
//! message itself, in the order it registered them with its resource
//! sharer as torch does (a Python receiver never sees the attached fds and
//! fetches). Registration follows the value depth first, as the receiver's
//! walk does, so the keys the walk meets ascend: each `DupFd` the walk
//! reaches takes the next attached fd, mapped without a round trip, and
//! its key goes back to the sender's sharer (the `notices` module)
//! so that it closes its copy. Once a `DupFd` names another sharer than the
//! first, or a key not past the last, the fds left are closed and every
//! storage from there on is fetched as from torch; an attached fd that
//! does not map as its storage (not shared memory, too small) is closed
//! and that storage fetched. The sender chooses the bytes either way: an
//! attached fd is trusted exactly as far as the sharer the same sender
//! names.

use std::cell::RefCell;
use std::os::fd::OwnedFd;

use super::{MessageOrigin, SharingContext};
use crate::Error;
use crate::model::{DupFdRef, SegmentRef, Storage};
use crate::registry::attach::{AttachFailed, StorageAttacher};

/// A message's storages being attached through `context`.
pub(crate) struct Receipt<'a> {
    context: &'a SharingContext,
    attached: RefCell<AttachedFds>,
    origin: MessageOrigin,
}

/// Fds that arrived with a message, in the order their `DupFd`s are met.
#[derive(Default)]
struct AttachedFds {
    /// The fds not yet paired, first at the end.
    unpaired: Vec<OwnedFd>,
    /// The sharer the first `DupFd` met names.
    sharer: Option<Vec<u8>>,
    /// The keys paired so far, ascending: what to give back.
    keys: Vec<i64>,
}

impl AttachedFds {
    fn new(mut fds: Vec<OwnedFd>) -> Self {
        fds.reverse();
        Self {
            unpaired: fds,
            ..Self::default()
        }
    }

    /// The fd that came for `dup_fd`: the next one, while the `DupFd`s met
    /// name one sharer with ascending keys. Out of order, none is paired
    /// any more.
    fn pair(&mut self, dup_fd: &DupFdRef) -> Option<OwnedFd> {
        let in_order = match (&self.sharer, self.keys.last()) {
            (Some(sharer), Some(&last)) => *sharer == dup_fd.address && dup_fd.key > last,
            _ => true,
        };
        if !in_order {
            self.unpaired.clear();
        }
        let fd = self.unpaired.pop()?;
        self.sharer.get_or_insert_with(|| dup_fd.address.clone());
        self.keys.push(dup_fd.key);
        Some(fd)
    }
}

impl<'a> Receipt<'a> {
    /// A receipt for a message of `origin` that arrived with `fds`.
    pub(crate) fn new(
        context: &'a SharingContext,
        fds: Vec<OwnedFd>,
        origin: MessageOrigin,
    ) -> Self {
        Self {
            context,
            attached: RefCell::new(AttachedFds::new(fds)),
            origin,
        }
    }
}

/// `result`, its error carried up through the rebuild, which ends with it
/// as [`Error::Attach`]'s cause.
fn carried(result: Result<Storage, Error>) -> Result<Storage, AttachFailed> {
    result.map_err(|cause| AttachFailed(Box::new(cause)))
}

impl Receipt<'_> {
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
    /// Gives every paired key back, mapped or not: the fds arrived, so the
    /// sender's copies are no longer needed, whatever became of the
    /// rebuild. An fd never paired is closed here; its key, never met, is
    /// left to the sender's deadline for unfetched fds.
    fn drop(&mut self) {
        let attached = self.attached.take();
        if let Some(sharer) = attached.sharer {
            self.context.state.notices.release(sharer, attached.keys);
        }
    }
}
