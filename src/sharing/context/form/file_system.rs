//! The `file_system` strategy in torch's form: storages live in named
//! segments with a reference-count header, and the name travels
//! (`rebuild_storage_filename(UntypedStorage, manager_handle, name, nbytes)`).

use tensorshare_compat::pickle::{Node, NodeId};
use tensorshare_strategies::file_system::{
    FileSystemSegment, FileSystemStrategy, SegmentHandle, SegmentName,
};
use tensorshare_strategies::services::shm_manager::ManagerHandle;
use tensorshare_strategies::{AllocateError, ImportError, SharingStrategy};

use super::{MessageParts, NamedHandle, TorchForm, not_a_handle};
use crate::Error;
use crate::model::{Residence, Storage, StorageWriter};
use crate::registry::REDUCTIONS;
use crate::sharing::context::SharingContext;
use crate::sharing::pools;
use tensorshare_compat::pickle::PickleBuilder;

impl TorchForm for FileSystemStrategy {
    const REBUILDER: &'static str = "rebuild_storage_filename";
    const HOLDER: &'static str = "segment";

    /// A segment from the context's pool when one of `nbytes` is free
    /// (nobody but this process counts it: see the `pools::segments`
    /// module of the source), zeroed; else a new one. Either way it goes
    /// back to the pool when the storage dies here.
    fn allocate_writer(
        context: &SharingContext,
        nbytes: usize,
    ) -> Result<StorageWriter, AllocateError> {
        pools::allocate(
            context.state.pools.segments(),
            &Self::shares(context).strategy,
            nbytes,
        )
    }

    /// Maps `nbytes` of the segment a message names, once per segment
    /// while it lives (torch's `storage_from_cache(cls, handle)`), and
    /// takes back the count its sender added for the message.
    fn attach(context: &SharingContext, named: NamedHandle<'_>) -> Result<Storage, Error> {
        let Residence::FileSystem(segment) = named.remote else {
            return Err(not_a_handle::<Self>(named.remote));
        };
        let invalid = |reason: String| ImportError::InvalidHandle { reason };
        let name = SegmentName::parse(&segment.name).map_err(|e| invalid(e.to_string()))?;
        let manager = ManagerHandle::from_bytes(&segment.manager_handle)
            .map_err(|e| invalid(format!("the manager handle: {e}")))?;
        Self::shares(context).receive(
            SegmentHandle::received(manager, name),
            named.nbytes,
            &context.state.pools,
        )
    }

    /// Storages travel as `rebuild_storage_filename(UntypedStorage,
    /// manager_handle, name, nbytes)`, adding one count per message as torch's
    /// `reduce_storage` does; the segment's manager is told which process the
    /// message goes to, so that the count stops holding the segment once that
    /// process has exited unread.
    fn write_handle(
        context: &SharingContext,
        storage: &Storage,
        segment: &FileSystemSegment,
        out: &mut PickleBuilder,
        message: &MessageParts,
    ) -> Result<NodeId, Error> {
        let (manager, name) = Self::shares(context).strategy.export(segment)?.into_parts();
        if let Some(receiver) = message.receiver {
            segment.sent_to(receiver);
        }
        let manager = out.push(Node::Bytes(manager.as_bytes().into()));
        let name = out.push(Node::Bytes(name.as_str().as_bytes().into()));
        let nbytes = out.int(storage.nbytes());
        let class = out.global("torch.storage", "UntypedStorage");
        let rebuild = out.global(REDUCTIONS, Self::REBUILDER);
        Ok(out.call(rebuild, vec![class, manager, name, nbytes]))
    }
}
