//! The `file_system` strategy in torch's form: storages live in named
//! segments with a reference-count header, and the name travels
//! (`rebuild_storage_filename(UntypedStorage, manager_handle, name, nbytes)`).

use std::sync::Arc;

use tensorshare_compat::pickle::{Node, NodeId};
use tensorshare_strategies::file_system::{
    FileSystemSegment, FileSystemStrategy, SegmentHandle, SegmentName,
};
use tensorshare_strategies::services::shm_manager::ManagerHandle;
use tensorshare_strategies::{ImportError, SharingStrategy, StrategyKind};

use super::SharingContext;
use super::SharingError;
use crate::model::{SegmentRef, Storage};
use crate::reduce::ReduceError;
use crate::reduce::{PickleBuilder, StorageReducer};
use crate::registry::REDUCTIONS;

/// Writes storages as `rebuild_storage_filename(UntypedStorage,
/// manager_handle, name, nbytes)`, adding one count per message as torch's
/// `reduce_storage` does.
pub(super) struct FsReducer<'a> {
    context: &'a SharingContext,
}

impl<'a> FsReducer<'a> {
    pub(super) fn new(context: &'a SharingContext) -> Self {
        Self { context }
    }
}

impl StorageReducer for FsReducer<'_> {
    type Error = SharingError;

    fn reduce_storage(
        &self,
        storage: &Storage,
        out: &mut PickleBuilder,
    ) -> Result<NodeId, SharingError> {
        if storage.nbytes() == 0 {
            // torch maps a 64-byte segment for an empty storage; it needs
            // none, and every torch rebuilds this form.
            return Ok(super::reduce_empty(out));
        }
        let shared = self
            .context
            .shared_copy(storage, StrategyKind::FileSystem)?;
        let segment = shared
            .local_segment::<FileSystemSegment>()
            .ok_or(ReduceError::NotMoved("segment"))?;
        self.context.by_name.insert(segment.name().clone(), &shared);
        let (manager, name) = FileSystemStrategy::default().export(segment)?.into_parts();

        let manager = out.push(Node::Bytes(manager.as_bytes().into()));
        let name = out.push(Node::Bytes(name.as_str().as_bytes().into()));
        let nbytes = out.int(storage.nbytes());
        let class = out.global("torch.storage", "UntypedStorage");
        let rebuild = out.global(REDUCTIONS, "rebuild_storage_filename");
        Ok(out.call(rebuild, vec![class, manager, name, nbytes]))
    }
}

impl SharingContext {
    /// Maps `nbytes` of the segment a message names, once per segment while
    /// it lives (torch's `storage_from_cache(cls, handle)`), and takes back
    /// the count its sender added for the message.
    pub(super) fn map_segment(
        &self,
        segment: &SegmentRef,
        nbytes: usize,
    ) -> Result<Storage, SharingError> {
        let invalid = |reason: String| ImportError::InvalidHandle { reason };
        let name = SegmentName::parse(&segment.name).map_err(|e| invalid(e.to_string()))?;
        let manager = ManagerHandle::from_bytes(&segment.manager_handle)
            .map_err(|e| invalid(format!("the manager handle: {e}")))?;
        let handle = SegmentHandle::received(manager, name);
        if let Some(cached) = self.by_name.get(handle.name())
            && cached.nbytes() >= nbytes
            && let Some(held) = cached.local_segment::<FileSystemSegment>()
        {
            held.absorb(handle)?;
            return Ok(cached);
        }
        // Not held, or held shorter than this message describes: map it
        // (again) rather than read past the end.
        let name = handle.name().clone();
        let segment = FileSystemStrategy::default().import(handle, nbytes)?;
        let storage = Storage::from_segment(Arc::new(segment));
        self.by_name.insert(name, &storage);
        Ok(storage)
    }
}
