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

use tensorshare_strategies::ImportError;

use super::form::{TorchForm, WithStrategy};
use super::{MessageOrigin, SharingContext};
use crate::Error;
use crate::model::{DupFdRef, Residence, Storage};
use crate::registry::attach::{AttachCause, StorageAttacher};
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
fn carried(result: Result<Storage, Error>) -> Result<Storage, AttachCause> {
    result.map_err(|cause| Box::new(cause) as AttachCause)
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

    /// The context attaching the message's storages.
    pub(super) fn context(&self) -> &'a SharingContext {
        self.context
    }

    /// The fd that arrived attached to the message for `dup_fd`, if one
    /// did and it was not taken yet.
    pub(super) fn take_attached_fd(&self, dup_fd: &DupFdRef) -> Option<OwnedFd> {
        self.attached.borrow_mut().pair(dup_fd)
    }
}

/// Each storage the message names is attached by the form of the strategy
/// that sent it, where this message's origin lets its memory reach.
impl StorageAttacher for Receipt<'_> {
    fn attach(&self, remote: &Residence, nbytes: usize) -> Result<Storage, AttachCause> {
        struct Attach<'r, 'a> {
            receipt: &'r Receipt<'a>,
            remote: &'r Residence,
            nbytes: usize,
        }
        impl WithStrategy for Attach<'_, '_> {
            type Output = Result<Storage, Error>;
            fn run<S: TorchForm>(self, _context: &SharingContext) -> Self::Output {
                self.receipt.origin.admit_shared_memory(S::REBUILDER)?;
                S::attach(self.receipt, self.remote, self.nbytes)
            }
        }
        let attached = match remote.strategy() {
            Some(kind) => self.context.using_strategy(
                kind,
                Attach {
                    receipt: self,
                    remote,
                    nbytes,
                },
            ),
            None => Err(ImportError::InvalidHandle {
                reason: "a storage on a GPU cannot be attached here".to_owned(),
            }
            .into()),
        };
        carried(attached)
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
