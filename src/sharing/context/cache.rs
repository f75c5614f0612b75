//! torch's `SharedCache`: weak values keyed by what identifies a shared
//! object, so repeat shares and repeat receipts give one storage.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

use crate::model::Storage;
use crate::model::WeakStorage;

/// The smallest limit, as in torch (`SharedCache.__init__`: 128).
const MIN_LIMIT: usize = 128;

/// A thread-safe map from keys to storages that does not keep them alive.
///
/// As torch's `SharedCache`: once it holds more than its limit, dead entries
/// are dropped and the limit becomes `max(128, 2 x live entries)`, so the
/// cost of pruning stays proportional to growth.
#[derive(Debug)]
pub struct WeakStorageCache<K> {
    inner: Mutex<CacheInner<K>>,
}

#[derive(Debug)]
struct CacheInner<K> {
    entries: HashMap<K, WeakStorage>,
    limit: usize,
}

impl<K: Eq + Hash + Clone> Default for WeakStorageCache<K> {
    fn default() -> Self {
        Self {
            inner: Mutex::new(CacheInner {
                entries: HashMap::new(),
                limit: MIN_LIMIT,
            }),
        }
    }
}

impl<K: Eq + Hash> CacheInner<K> {
    fn insert(&mut self, key: K, storage: &Storage) {
        self.entries.insert(key, storage.downgrade());
        if self.entries.len() > self.limit {
            self.entries.retain(|_, weak| weak.is_alive());
            self.limit = MIN_LIMIT.max(2 * self.entries.len());
        }
    }
}

impl<K: Eq + Hash + Clone> WeakStorageCache<K> {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The live storage under `key`, or the one `make` builds, which is then
    /// cached. `make` runs under the cache's lock, so two threads asking for
    /// one key get one storage.
    ///
    /// # Errors
    ///
    /// Whatever `make` returns; nothing is cached then.
    #[cfg(test)]
    pub fn get_or_try_insert<E>(
        &self,
        key: &K,
        make: impl FnOnce() -> Result<Storage, E>,
    ) -> Result<Storage, E> {
        let (storage, _) = self.get_or_try_replace(key, |_| true, (), |()| make())?;
        Ok(storage)
    }

    /// The live storage under `key` if `usable` accepts it, with `input`
    /// handed back; else the one `make` builds from `input`, which then
    /// replaces it. `make` runs under the cache's lock, so two threads asking
    /// for one key get one storage.
    ///
    /// # Errors
    ///
    /// Whatever `make` returns; the cache is left as it was then.
    pub fn get_or_try_replace<T, E>(
        &self,
        key: &K,
        usable: impl FnOnce(&Storage) -> bool,
        input: T,
        make: impl FnOnce(T) -> Result<Storage, E>,
    ) -> Result<(Storage, Option<T>), E> {
        let mut inner = self.lock();
        if let Some(storage) = inner.entries.get(key).and_then(WeakStorage::upgrade)
            && usable(&storage)
        {
            return Ok((storage, Some(input)));
        }
        let storage = make(input)?;
        inner.insert(key.clone(), &storage);
        Ok((storage, None))
    }

    /// Caches `storage` under `key`, replacing what was there.
    pub fn insert(&self, key: K, storage: &Storage) {
        self.lock().insert(key, storage);
    }

    /// The live storage under `key`, if any.
    #[cfg(test)]
    pub fn get(&self, key: &K) -> Option<Storage> {
        self.lock().entries.get(key).and_then(WeakStorage::upgrade)
    }

    /// How many entries (live or not yet pruned) the cache holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner<K>> {
        // A panic while holding the lock leaves a map that is still valid:
        // keep using it rather than poisoning every later share.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_live_storage_and_forgets_dead_ones() {
        let cache = WeakStorageCache::new();
        let a = cache
            .get_or_try_insert(&1, || Ok::<_, ()>(Storage::from_vec(vec![1])))
            .unwrap();
        let again = cache
            .get_or_try_insert(&1, || Ok::<_, ()>(Storage::from_vec(vec![2])))
            .unwrap();
        assert!(a.same_as(&again));
        drop((a, again));
        assert!(cache.get(&1).is_none());
        let fresh = cache
            .get_or_try_insert(&1, || Ok::<_, ()>(Storage::from_vec(vec![3])))
            .unwrap();
        assert_eq!(fresh.bytes(), Some(&[3u8][..]));
    }

    #[test]
    fn prunes_dead_entries_past_the_limit() {
        let cache = WeakStorageCache::new();
        let keep: Vec<Storage> = (0..10)
            .map(|k| {
                cache
                    .get_or_try_insert(&k, || Ok::<_, ()>(Storage::from_vec(vec![0])))
                    .unwrap()
            })
            .collect();
        for k in 10..1000 {
            cache
                .get_or_try_insert(&k, || Ok::<_, ()>(Storage::from_vec(vec![0])))
                .unwrap();
        }
        // Dead entries are dropped whenever the map passes its limit.
        assert!(
            cache.len() <= MIN_LIMIT + 1,
            "cache kept {} entries",
            cache.len()
        );
        for (k, storage) in keep.iter().enumerate() {
            assert!(cache.get(&k).unwrap().same_as(storage));
        }
    }

    #[test]
    fn concurrent_lookups_of_one_key_give_one_storage() {
        let cache = std::sync::Arc::new(WeakStorageCache::new());
        let made = std::sync::atomic::AtomicUsize::new(0);
        let storages: Vec<Storage> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| {
                        cache
                            .get_or_try_insert(&"key", || {
                                made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                Ok::<_, ()>(Storage::from_vec(vec![7; 16]))
                            })
                            .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(storages.windows(2).all(|w| w[0].same_as(&w[1])));
    }
}
