//! Receiving a message, one way: its pickle decoded with the registry as
//! the allowlist, rebuilt in one walk that lists the shared storages it
//! names, then those storages attached, each through its strategy's form,
//! with the fds that arrived attached to the message.
//!
//! A tensorshare sender attaches the fd of every storage it shares to the
//! message itself, in the order it registered them with its resource
//! sharer, as torch does, so in ascending key order; it attaches all of
//! them or none (a Python receiver never sees the attached fds and
//! fetches). The receiver pairs them by what the message says, not by
//! walking it as the sender did: when the message's `DupFd`s name one
//! sharer and as many distinct keys as fds arrived, the smallest key takes
//! the first fd, and so on; each `DupFd` the rebuild listed takes its key's
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

use tensorshare_compat::pickle::{
    DecodeError, DecodeErrorCode, Decoded, Pickle, SharedBytes, decode_all, decode_all_shared,
};

use super::form::{NamedHandle, attach};
use super::{MessageOrigin, SharingContext};
use crate::Error;
use crate::model::{DupFdRef, Residence, Value};
use crate::registry::attach::NamedStorage;
use crate::registry::rebuild::Walker;
use crate::registry::{RebuildError, Registry, UnknownGlobals, dup_fd_ids};

/// A message's storages being attached through `context`.
pub(crate) struct Receipt<'a> {
    context: &'a SharingContext,
    attached: AttachedFds,
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
            attached: AttachedFds::new(fds, pickle),
            origin,
        }
    }

    /// Attaches every storage the rebuilt message names, in the order the
    /// rebuild met them: each then stands for the storage its handle names
    /// here, wherever the value holds it.
    ///
    /// # Errors
    ///
    /// [`Error::Attach`] for the first that cannot be attached, naming its
    /// rebuilder. The ones after it are attached all the same and let go
    /// of with the value, so that what their senders hold for the message
    /// (a segment's count, an fd in the sharer) is taken back.
    pub(super) fn attach_all(&mut self, named: Vec<NamedStorage>) -> Result<(), Error> {
        let mut first_failure = None;
        for NamedStorage { callee, storage } in named {
            let attached_fd = match storage.residence() {
                Residence::FileDescriptor(dup_fd) => self.attached.pair(dup_fd),
                _ => None,
            };
            let handle = NamedHandle {
                remote: storage.residence(),
                nbytes: storage.nbytes(),
                attached_fd,
            };
            match attach(self.context, self.origin, handle) {
                Ok(attached) => {
                    // The rebuild lists each storage it made once.
                    let _ = storage.attach(attached);
                }
                Err(cause) if first_failure.is_none() => {
                    first_failure = Some(Error::Attach {
                        callee,
                        cause: Box::new(cause),
                    });
                }
                Err(_) => {}
            }
        }
        first_failure.map_or(Ok(()), Err)
    }
}

impl std::fmt::Debug for Receipt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receipt")
            .field("paired", &self.attached.keys.len())
            .field("unpaired", &self.attached.unpaired.len())
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
        let attached = std::mem::take(&mut self.attached);
        if let Some(sharer) = attached.sharer {
            self.context.state.notices.release(sharer, attached.keys);
        }
    }
}

/// Receiving a message: its pickle decoded, rebuilt, and its shared
/// storages attached, in that order.
impl SharingContext {
    /// Rebuilds a pickle and attaches every shared storage it names.
    ///
    /// For a pickle that arrived some other way than a [`Connection`](crate::Connection)
    /// (which [`Connection::recv`](crate::Connection::recv) reads and
    /// rebuilds): see the [crate docs](crate#receiving-connectionrecv-or-sharingcontextloads).
    ///
    /// # Errors
    ///
    /// Any decoding or rebuilding error; a storage whose fd cannot be fetched
    /// (sender gone, wrong authkey).
    pub fn loads(&self, bytes: &[u8]) -> Result<Value, Error> {
        let limits = self.settings.registry.options().limits;
        let decode = |registry: &Registry| decode_all(bytes, registry, &limits);
        self.receive(decode, Vec::new(), MessageOrigin::Local)
    }

    /// Rebuilds a pickle that arrived with `fds` attached (see
    /// [`with_inline_fds`](Self::with_inline_fds)), mapping storages from
    /// them where they pair with the message's `DupFd`s and fetching the
    /// rest.
    ///
    /// Large `bytes` in the message (a `bytes`-strategy storage) are read
    /// from `message`'s buffer: a storage's bytes are copied once, into the
    /// storage. A message of `origin` TCP may name no shared memory.
    pub(crate) fn loads_with_fds(
        &self,
        message: &SharedBytes,
        fds: Vec<OwnedFd>,
        origin: MessageOrigin,
    ) -> Result<Value, Error> {
        let limits = self.settings.registry.options().limits;
        let decode = |registry: &Registry| decode_all_shared(message, registry, &limits);
        self.receive(decode, fds, origin)
    }

    /// A message that `decode` reads with a registry as its allowlist,
    /// rebuilt, and its storages attached.
    ///
    /// A message the registry refuses for a global it names still gives
    /// back what its sender holds for it (a segment's count, an fd in the
    /// sender's sharer), which a torch receiver leaves held: `decode` reads
    /// it again with every unknown global inert, and the storages torch's
    /// forms name in it are attached and let go of, with no rebuilder of
    /// this context's registry run. Any other refusal leaves no pickle to
    /// read them from.
    fn receive(
        &self,
        decode: impl Fn(&Registry) -> Result<Decoded, DecodeError>,
        fds: Vec<OwnedFd>,
        origin: MessageOrigin,
    ) -> Result<Value, Error> {
        let refused = match decode(self.registry()) {
            Ok(decoded) => return self.rebuild_message(decoded, fds, origin),
            Err(refused) => refused,
        };
        if matches!(refused.code, DecodeErrorCode::DisallowedGlobal { .. }) {
            let options = self.settings.registry.options().clone();
            let inert = Registry::default()
                .with_options(options.with_unknown_globals(UnknownGlobals::Opaque));
            if let Ok(decoded) = decode(&inert) {
                let (_, named) = rebuild_naming(&inert, &decoded.pickle);
                let _ = Receipt::new(self, &decoded.pickle, fds, origin).attach_all(named);
            }
        }
        Err(refused.into())
    }

    fn rebuild_message(
        &self,
        decoded: Decoded,
        fds: Vec<OwnedFd>,
        origin: MessageOrigin,
    ) -> Result<Value, Error> {
        let (rebuilt, named) = rebuild_naming(&self.settings.registry, &decoded.pickle);
        if named.is_empty() && fds.is_empty() {
            return rebuilt.map_err(Error::from);
        }
        let mut receipt = Receipt::new(self, &decoded.pickle, fds, origin);
        match rebuilt {
            Ok(value) => {
                receipt.attach_all(named)?;
                Ok(value)
            }
            Err(refused) => {
                // What the storages named so far hold for this message (a
                // segment's count, an fd in the sender's sharer) is taken
                // back as their attaching does, then let go of here.
                let _ = receipt.attach_all(named);
                Err(refused.into())
            }
        }
    }
}

/// Rebuilds `pickle`, a received message, with `registry`, listing the
/// shared storages it names to be attached after: with the value, or with
/// the error that stopped the rebuild, since the storages named before it
/// still hold what their senders keep for this message until they are
/// attached.
fn rebuild_naming(
    registry: &Registry,
    pickle: &Pickle,
) -> (Result<Value, RebuildError>, Vec<NamedStorage>) {
    let named = RefCell::default();
    let rebuilt = Walker::new(registry, pickle, None)
        .naming_into(Some(&named))
        .run();
    (rebuilt, named.into_inner())
}
