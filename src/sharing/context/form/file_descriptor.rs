//! The `file_descriptor` strategy in torch's form: storages live in memfds
//! whose fds travel through the resource sharer (`rebuild_storage_fd` with a
//! `DupFd`).

use std::os::fd::OwnedFd;

use tensorshare_compat::pickle::{Node, NodeId};
use tensorshare_strategies::file_descriptor::{FdSegment, FileDescriptorStrategy};
use tensorshare_strategies::{AllocateError, SharingStrategy};

use super::{MessageParts, NamedHandle, TorchForm, not_a_handle};
use crate::Error;
use crate::model::{DupFdRef, Residence, Storage, StorageWriter};
use crate::registry::{DUP_FD, REDUCTIONS};
use crate::sharing::context::SharingContext;
use crate::sharing::notices::FdLanding;
use crate::sharing::pools;
use tensorshare_compat::pickle::PickleBuilder;

impl TorchForm for FileDescriptorStrategy {
    const REBUILDER: &'static str = "rebuild_storage_fd";
    const HOLDER: &'static str = "memfd";

    /// A memfd from the context's pool when one is free (zeroed), else a
    /// new one adopted by the pool: it comes back for reuse once every
    /// process it was sent to has unmapped it.
    fn allocate_writer(
        context: &SharingContext,
        nbytes: usize,
    ) -> Result<StorageWriter, AllocateError> {
        if let Some(reports) = context.take_sharer_reports() {
            context.state.pools.take_memfd_reports(reports);
        }
        pools::allocate(
            context.state.pools.memfds(),
            &Self::shares(context).strategy,
            nbytes,
        )
    }

    /// The storage a `DupFd` names: mapped from the fd attached to the
    /// message for it when one came, else fetched from the sender's
    /// resource sharer.
    fn attach(context: &SharingContext, named: NamedHandle<'_>) -> Result<Storage, Error> {
        let NamedHandle {
            remote,
            nbytes,
            attached_fd,
        } = named;
        let Residence::FileDescriptor(dup_fd) = remote else {
            return Err(not_a_handle::<Self>(remote));
        };
        // An attached fd that cannot be what the DupFd names (not shared
        // memory, too small, not writable) is not trusted over the sharer.
        if let Some(Ok(storage)) = attached_fd.map(|fd| context.map_fd(fd, nbytes, Some(dup_fd))) {
            return Ok(storage);
        }
        let fd = context.fetch_fd(&dup_fd.address, dup_fd.key)?;
        context.map_fd(fd, nbytes, None)
    }

    /// Storages travel as `rebuild_storage_fd(UntypedStorage, DupFd, nbytes)`,
    /// the `DupFd` naming the fd registered with the context's resource sharer.
    fn write_handle(
        context: &SharingContext,
        storage: &Storage,
        segment: &FdSegment,
        out: &mut PickleBuilder,
        message: &MessageParts,
    ) -> Result<NodeId, Error> {
        let identity = segment.identity();
        let fd = Self::shares(context).strategy.export(segment)?;
        let registration = context.resource_sharer()?.register(fd)?;
        let id = registration.id().clone();
        context.state.pools.memfd_sent(identity, id.key);
        context.state.notices.sent_on(identity);
        context.keep_registration(registration, message.receiver);
        message
            .attachable
            .borrow_mut()
            .push((id.key, storage.clone()));

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
        let dup_fd_class = out.global(DUP_FD.0, DUP_FD.1);
        let dup_fd = out.new_object_with_state(dup_fd_class, state);
        let nbytes = out.int(storage.nbytes());
        let class = out.global("torch.storage", "UntypedStorage");
        let rebuild = out.global(REDUCTIONS, Self::REBUILDER);
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
    fn map_fd(
        &self,
        fd: OwnedFd,
        nbytes: usize,
        attached: Option<&DupFdRef>,
    ) -> Result<Storage, Error> {
        let landing = FdLanding {
            notices: &self.state.notices,
            budget: self.received_fd_budget(),
            attached,
        };
        FileDescriptorStrategy::shares(self).receive(fd, nbytes, &landing)
    }
}
