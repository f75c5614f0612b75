//! The default placement as a context allocates: each new storage where the
//! rule of [`Placement`] puts it, and a hand-off small enough to travel
//! inline in this process's own memory.

use tensorshare_strategies::{AllocateError, Exhausted, StrategyKind};

use super::super::placement::Placement;
use super::super::pools;
use super::SharingContext;
use crate::model::{Storage, StorageWriter};

impl SharingContext {
    /// What the default placement knows of this process and machine.
    pub(super) fn placement(&self) -> &Placement {
        &self.state.placement
    }

    /// A storage of `nbytes` placed by the default: a free segment of the
    /// pool of that size, which costs `/dev/shm` nothing more; else a new
    /// segment or memfd where [`Placement::for_new`] says, the other when
    /// that one runs out first.
    pub(super) fn allocate_placed(&self, nbytes: usize) -> Result<StorageWriter, AllocateError> {
        let placement = self.placement();
        if placement.segments_safe()
            && let Some(writer) = pools::take(self.state.pools.segments(), nbytes)
        {
            return Ok(writer);
        }
        match placement.for_new(nbytes) {
            StrategyKind::FileSystem => {
                match self.allocate_with(StrategyKind::FileSystem, nbytes) {
                    // Another process took the room since it was looked at.
                    Err(AllocateError::SharedMemoryFull { .. }) => {
                        self.allocate_with(StrategyKind::FileDescriptor, nbytes)
                    }
                    allocated => allocated,
                }
            }
            kind => match self.allocate_with(kind, nbytes) {
                // A segment needs no fd once mapped.
                Err(
                    error @ AllocateError::Exhausted {
                        limit: Exhausted::FileDescriptors(_),
                        ..
                    },
                ) if placement.segment_fits_at_all(nbytes) => self
                    .allocate_with(StrategyKind::FileSystem, nbytes)
                    .map_err(|_| error),
                allocated => allocated,
            },
        }
    }

    /// A storage of `nbytes` that its sender hands off, to be written in
    /// place and sent once ([`SharingContext::batch`]): under the default,
    /// in this process's own memory when it is small enough to travel
    /// inline, else as [`allocate`](Self::allocate) places it.
    pub(crate) fn allocate_hand_off(&self, nbytes: usize) -> Result<StorageWriter, AllocateError> {
        if self.strategy().is_none() && Placement::hand_off_inline(nbytes) {
            return Storage::allocate(StrategyKind::Bytes, nbytes);
        }
        self.allocate(nbytes)
    }
}
