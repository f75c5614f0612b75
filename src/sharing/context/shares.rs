//! One strategy's part of a context: its configured instance and the
//! storages it holds by shared object, and the one way every strategy's
//! received handles become storages.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, OnceLock};

use tensorshare_strategies::{SharingStrategy, StrategyKind};

use super::cache::WeakStorageCache;
use crate::Error;
use crate::model::Storage;

/// A strategy as a context uses it.
#[derive(Debug)]
pub(crate) struct Shares<S: SharingStrategy> {
    pub(super) strategy: S,
    /// Sent and received storages by the object they map, as torch's
    /// `shared_cache` keys them: one mapping per shared object while it
    /// lives, and a storage that comes back is the one that was sent.
    cache: WeakStorageCache<S::Key>,
}

/// A received storage, and whether this receipt mapped it (`false`: the
/// storage was held already, and the handle joined it).
pub(super) struct Arrival {
    pub(super) storage: Storage,
    pub(super) mapped: bool,
}

impl<S: SharingStrategy> Shares<S> {
    pub(super) fn new(strategy: S) -> Self {
        Self {
            strategy,
            cache: WeakStorageCache::new(),
        }
    }

    /// Remembers that `storage`, which maps `segment`, is the one to give
    /// when the object comes back.
    pub(super) fn sent(&self, segment: &S::Segment, storage: &Storage) {
        if let Some(key) = S::segment_key(segment) {
            self.cache.insert(key, storage);
        }
    }

    /// The storage of `nbytes` a received handle names: the one this
    /// process holds of the same object, at least that long, which the
    /// handle then [joins](SharingStrategy::join_held); else the object
    /// mapped (again: a later message may describe more of it than an
    /// earlier one mapped), through the mapping `dormant` keeps for it if
    /// any, and made a storage by `storage_of`.
    pub(super) fn receive(
        &self,
        handle: S::Handle,
        nbytes: usize,
        dormant: impl FnOnce(&S::Key) -> Option<S::Dormant>,
        storage_of: impl FnOnce(S::Segment) -> Storage,
    ) -> Result<Arrival, Error> {
        let received = self.strategy.open(handle)?;
        let Some(key) = S::received_key(&received) else {
            let segment = self.strategy.map_received(received, nbytes, None)?;
            return Ok(Arrival {
                storage: storage_of(segment),
                mapped: true,
            });
        };
        let (storage, unmapped) = self.cache.get_or_try_replace(
            &key,
            |held| held.nbytes() >= nbytes && held.segment_of::<S>().is_some(),
            received,
            |received| {
                let segment = self
                    .strategy
                    .map_received(received, nbytes, dormant(&key))?;
                Ok::<_, Error>(storage_of(segment))
            },
        )?;
        let mapped = match unmapped {
            Some(received) => {
                if let Some(held) = storage.segment_of::<S>() {
                    self.strategy.join_held(held, received)?;
                }
                false
            }
            None => true,
        };
        Ok(Arrival { storage, mapped })
    }

    /// [`receive`](Self::receive) for a strategy that keeps no mapping
    /// dormant, into a plain storage.
    pub(super) fn receive_plain(&self, handle: S::Handle, nbytes: usize) -> Result<Storage, Error> {
        let arrival = self.receive(
            handle,
            nbytes,
            |_| None,
            |segment| Storage::from_segment(Arc::new(segment)),
        )?;
        Ok(arrival.storage)
    }
}

/// Every strategy's [`Shares`] in a context, each made on first use with
/// the strategy's default configuration: a strategy added to the list of
/// forms needs no field here.
#[derive(Default)]
pub(super) struct SharesByKind {
    /// By the kind's place in [`StrategyKind::ALL`].
    slots: [OnceLock<Box<dyn Any + Send + Sync>>; StrategyKind::ALL.len()],
}

impl SharesByKind {
    /// `S`'s part, made now if this is its first use.
    pub(super) fn get<S: SharingStrategy + Default + 'static>(&self) -> &Shares<S> {
        let place = StrategyKind::ALL
            .iter()
            .position(|kind| *kind == S::KIND)
            .unwrap_or_default();
        self.slots[place]
            .get_or_init(|| Box::new(Shares::new(S::default())))
            .downcast_ref()
            // The list of forms gives each kind one type, so a slot holds
            // the shares of the type that asks for it.
            .expect("one strategy type per kind")
    }
}

impl fmt::Debug for SharesByKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let made: Vec<StrategyKind> = StrategyKind::ALL
            .into_iter()
            .zip(&self.slots)
            .filter_map(|(kind, slot)| slot.get().map(|_| kind))
            .collect();
        f.debug_struct("SharesByKind").field("made", &made).finish()
    }
}
