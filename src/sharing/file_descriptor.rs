//! The `file_descriptor` strategy in torch's form: storages live in memfds
//! whose fds travel through the resource sharer (`rebuild_storage_fd` with a
//! `DupFd`).

use std::cell::RefCell;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use tensorshare_compat::pickle::{Node, NodeId};
use tensorshare_strategies::file_descriptor::{FdSegment, FileDescriptorStrategy, ReceivedFd};
use tensorshare_strategies::{SharingStrategy, StrategyKind};

use super::SharingContext;
use super::SharingError;
use crate::model::{DupFdRef, Storage};
use crate::reduce::ReduceError;
use crate::reduce::{PickleBuilder, StorageReducer};
use crate::registry::REDUCTIONS;

/// Writes storages as `rebuild_storage_fd(UntypedStorage, DupFd, nbytes)`,
/// and keeps each shared storage with its registration key.
pub(super) struct FdReducer<'a> {
    context: &'a SharingContext,
    shared: RefCell<Vec<(i64, Storage)>>,
}

impl<'a> FdReducer<'a> {
    pub(super) fn new(context: &'a SharingContext) -> Self {
        Self {
            context,
            shared: RefCell::new(Vec::new()),
        }
    }

    /// The storages shared so far, each with the key its `DupFd` names.
    pub(super) fn into_shared(self) -> Vec<(i64, Storage)> {
        self.shared.into_inner()
    }
}

impl StorageReducer for FdReducer<'_> {
    type Error = SharingError;

    fn reduce_storage(
        &self,
        storage: &Storage,
        out: &mut PickleBuilder,
    ) -> Result<NodeId, SharingError> {
        if storage.nbytes() == 0 {
            return Ok(super::reduce_empty(out));
        }
        let shared = self
            .context
            .shared_copy(storage, StrategyKind::FileDescriptor)?;
        let segment = shared
            .local_segment::<FdSegment>()
            .ok_or(ReduceError::NotMoved("memfd"))?;
        let identity = segment.identity();
        self.context.by_inode.insert(identity, &shared);
        let fd = FileDescriptorStrategy.export(segment)?;
        let registration = self.context.resource_sharer()?.register(fd)?;
        let id = registration.id().clone();
        self.context.pool.sent(identity, id.key);
        self.context.notices.sent_on(identity);
        self.context.keep_registration(registration);
        self.shared.borrow_mut().push((id.key, shared.clone()));

        // CPython reports abstract socket names as bytes, paths as str.
        let address = if id.address.starts_with('\0') {
            out.push(Node::Bytes(id.address.clone().into_bytes().into()))
        } else {
            out.push(Node::Str(id.address.clone()))
        };
        let key = out.push(Node::Int(id.key));
        let address_key = out.tuple(vec![address, key]);
        let id_name = out.push(Node::Str("_id".into()));
        let state = out.push(Node::Dict(vec![(id_name, address_key)]));
        let dup_fd_class = out.global("multiprocessing.resource_sharer", "DupFd");
        let dup_fd = out.new_object_with_state(dup_fd_class, state);
        let nbytes = out.int(storage.nbytes());
        let class = out.global("torch.storage", "UntypedStorage");
        let rebuild = out.global(REDUCTIONS, "rebuild_storage_fd");
        Ok(out.call(rebuild, vec![class, dup_fd, nbytes]))
    }
}

impl SharingContext {
    /// Maps `nbytes` of a received fd, once per shared object while it
    /// lives (torch's `storage_from_cache` by `(st_dev, st_ino)`).
    ///
    /// The storage keeps its fd only within the context's
    /// [budget](SharingContext::with_max_received_fds).
    ///
    /// An fd that came `attached` to its message, under a key from a
    /// tensorshare sharer, makes a storage whose sender hears when it is
    /// unmapped here, so that it may reuse the memory.
    pub(super) fn map_fd(
        &self,
        fd: OwnedFd,
        nbytes: usize,
        attached: Option<&DupFdRef>,
    ) -> Result<Storage, SharingError> {
        let received = ReceivedFd::new(fd)?;
        let identity = received.identity();
        let mut mapped_here = false;
        // A later message may describe more of the object than an earlier
        // one mapped: map it again rather than read past the end.
        let storage = self.by_inode.get_or_try_replace(
            &identity,
            |cached| cached.nbytes() >= nbytes,
            || {
                mapped_here = true;
                let mut segment = match self.notices.take_dormant(identity) {
                    Some(dormant) => {
                        FileDescriptorStrategy.import_reusing(received, nbytes, dormant)?
                    }
                    None => FileDescriptorStrategy.import_received(received, nbytes)?,
                };
                segment.keep_fd_within(&self.received_fds);
                Ok::<_, SharingError>(match attached {
                    Some(dup_fd) => Storage::from_segment(Arc::new(self.notices.noticed(
                        segment,
                        &dup_fd.address,
                        dup_fd.key,
                    ))),
                    None => Storage::from_segment(Arc::new(segment)),
                })
            },
        )?;
        if let (Some(dup_fd), false) = (attached, mapped_here) {
            self.notices
                .arrived_again(identity, &dup_fd.address, dup_fd.key);
        }
        Ok(storage)
    }
}
