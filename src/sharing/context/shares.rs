//! One strategy's part of a context: its configured instance and the
//! storages it holds by shared object, and the one way every strategy's
//! received handles become storages.

use std::any::Any;
use std::fmt;
use std::sync::OnceLock;

use tensorshare_strategies::{SharingStrategy, StrategyKind};

use super::cache::WeakStorageCache;
use crate::Error;
use crate::model::Storage;
use crate::sharing::pools::{Landing, Unkept};

/// A strategy as a context uses it.
#[derive(Debug)]
pub(crate) struct Shares<S: SharingStrategy> {
    pub(super) strategy: S,
    /// Sent and received storages by the object they map, as torch's
    /// `shared_cache` keys them: one mapping per shared object while it
    /// lives, and a storage that comes back is the one that was sent.
    cache: WeakStorageCache<S::Key>,
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
    /// earlier one mapped), through the mapping `landing` kept dormant for
    /// it if any, and made a storage by `landing`. The cache's entry stays
    /// held while the object is mapped, so that two threads receiving it
    /// get one storage. `landing` hears of a handle that joined a storage
    /// held ([`Landing::joined`]).
    pub(super) fn receive(
        &self,
        handle: S::Handle,
        nbytes: usize,
        landing: &impl Landing<S>,
    ) -> Result<Storage, Error> {
        let received = self.strategy.open(handle)?;
        let Some(key) = S::received_key(&received) else {
            let segment = self.strategy.map_received(received, nbytes, None)?;
            return Ok(landing.storage_of(segment));
        };
        let entry = self.cache.entry(&key);
        if let Some(storage) = entry.live().filter(|held| held.nbytes() >= nbytes)
            && let Some(held) = storage.segment_of::<S>()
        {
            drop(entry);
            self.strategy.join_held(held, received)?;
            landing.joined(held);
            return Ok(storage);
        }
        let dormant = landing.take_dormant(&key);
        let segment = self.strategy.map_received(received, nbytes, dormant)?;
        let storage = landing.storage_of(segment);
        entry.fill(&storage);
        Ok(storage)
    }

    /// [`receive`](Self::receive) for a strategy whose received segments
    /// nothing keeps, into a plain storage.
    pub(super) fn receive_plain(&self, handle: S::Handle, nbytes: usize) -> Result<Storage, Error> {
        self.receive(handle, nbytes, &Unkept)
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
