//! The `file_descriptor` strategy in torch's form: storages live in memfds
//! whose fds travel through the resource sharer (`rebuild_storage_fd` with a
//! `DupFd`).

use std::cell::RefCell;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use tensorshare_compat::pickle::{Node, NodeId};
use tensorshare_strategies::SharingStrategy;
use tensorshare_strategies::file_descriptor::{FdSegment, FileDescriptorStrategy, ReceivedFd};

use super::{SharingContext, lock};
use crate::reduce::{PickleBuilder, StorageReducer};
use crate::registry::REDUCTIONS;
use crate::{Error, Residence, Storage, StrategyKind};

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

/// The memfd segment `storage` lives in, if it does.
pub(super) fn fd_segment(storage: &Storage) -> Option<&FdSegment> {
    match storage.residence() {
        Residence::Local(segment) => segment.downcast_ref::<FdSegment>(),
        _ => None,
    }
}

impl StorageReducer for FdReducer<'_> {
    fn reduce_storage(&self, storage: &Storage, out: &mut PickleBuilder) -> Result<NodeId, Error> {
        let class = out.global("torch.storage", "UntypedStorage");
        if storage.nbytes() == 0 {
            // torch's reduce_storage: an empty storage cannot be mapped.
            let rebuild = out.global(REDUCTIONS, "rebuild_storage_empty");
            return Ok(out.call(rebuild, vec![class]));
        }
        let shared = self.context.shared_copy(storage)?;
        let segment = fd_segment(&shared)
            .ok_or_else(|| Error::Unsupported("storage did not move into a memfd".into()))?;
        self.context.by_inode.insert(segment.identity(), &shared);
        let fd = FileDescriptorStrategy.export(segment)?;
        let registration = self.context.resource_sharer()?.register(fd)?;
        let id = registration.id().clone();
        self.context.keep_registration(registration);
        self.shared.borrow_mut().push((id.key, shared.clone()));

        // CPython reports abstract socket names as bytes, paths as str.
        let address = if id.address.starts_with('\0') {
            out.push(Node::Bytes(id.address.clone().into_bytes()))
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
        let rebuild = out.global(REDUCTIONS, "rebuild_storage_fd");
        Ok(out.call(rebuild, vec![class, dup_fd, nbytes]))
    }
}

impl SharingContext {
    /// `storage` itself when it already lives in a memfd, else its copy in
    /// one, made once per storage (torch's `share_memory_()`).
    fn shared_copy(&self, storage: &Storage) -> Result<Storage, Error> {
        let Residence::Local(segment) = storage.residence() else {
            return Err(Error::Unsupported(format!(
                "a {} storage whose bytes are not in this process cannot be sent; receive it with a SharingContext to attach it first",
                storage.kind()
            )));
        };
        if segment.downcast_ref::<FdSegment>().is_some() {
            return Ok(storage.clone());
        }
        let mut exported = lock(&self.exported);
        if let Some(copy) = exported.get(storage) {
            return Ok(copy);
        }
        let bytes = storage.bytes().ok_or_else(|| {
            Error::Unsupported("the storage claims more bytes than its segment holds".into())
        })?;
        // Under the lock, so that one storage sent from two threads at once
        // still moves into one segment.
        let mut writer = Storage::allocate(StrategyKind::FileDescriptor, bytes.len())?;
        writer.as_bytes_mut().copy_from_slice(bytes);
        let copy = writer.freeze();
        exported.insert(storage, &copy);
        Ok(copy)
    }

    /// Maps `nbytes` of a received fd, once per shared object while it
    /// lives (torch's `storage_from_cache` by `(st_dev, st_ino)`).
    pub(super) fn map_fd(&self, fd: OwnedFd, nbytes: usize) -> Result<Storage, Error> {
        let received = ReceivedFd::new(fd)?;
        let identity = received.identity();
        let import = |received| -> Result<Storage, Error> {
            let segment = FileDescriptorStrategy.import_received(received, nbytes)?;
            Ok(Storage::from_segment(Arc::new(segment)))
        };
        match self.by_inode.get(&identity) {
            Some(cached) if cached.nbytes() >= nbytes => Ok(cached),
            // A later message may describe more of the object than an
            // earlier one mapped: map it again rather than read past the end.
            Some(_) => import(received),
            None => self
                .by_inode
                .get_or_try_insert(&identity, || import(received)),
        }
    }
}
