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

    /// The cache's entry for `key`, held: no other thread reads or fills
    /// the cache until it is dropped, so two threads that each look up
    /// one key and fill it when empty get one storage.
    pub fn entry<'k>(&self, key: &'k K) -> Entry<'_, 'k, K> {
        Entry {
            inner: self.lock(),
            key,
        }
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

/// One key of a [`WeakStorageCache`], with the cache held.
pub struct Entry<'a, 'k, K> {
    inner: std::sync::MutexGuard<'a, CacheInner<K>>,
    key: &'k K,
}

impl<K: Eq + Hash + Clone> Entry<'_, '_, K> {
    /// The live storage under the key, if any.
    pub fn live(&self) -> Option<Storage> {
        self.inner
            .entries
            .get(self.key)
            .and_then(WeakStorage::upgrade)
    }

    /// Caches `storage` under the key, replacing what was there.
    pub fn fill(mut self, storage: &Storage) {
        self.inner.insert(self.key.clone(), storage);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The live storage under `key`, or `make`'s, then cached.
    fn get_or_insert<K: Eq + Hash + Clone>(
        cache: &WeakStorageCache<K>,
        key: K,
        make: impl FnOnce() -> Storage,
    ) -> Storage {
        let entry = cache.entry(&key);
        if let Some(live) = entry.live() {
            return live;
        }
        let made = make();
        entry.fill(&made);
        made
    }

    #[test]
    fn returns_the_live_storage_and_forgets_dead_ones() {
        let cache = WeakStorageCache::new();
        let a = get_or_insert(&cache, 1, || Storage::from_vec(vec![1]));
        let again = get_or_insert(&cache, 1, || Storage::from_vec(vec![2]));
        assert!(a.same_as(&again));
        drop((a, again));
        assert!(cache.get(&1).is_none());
        let fresh = get_or_insert(&cache, 1, || Storage::from_vec(vec![3]));
        assert_eq!(fresh.bytes(), Some(&[3u8][..]));
    }

    #[test]
    fn prunes_dead_entries_past_the_limit() {
        let cache = WeakStorageCache::new();
        let keep: Vec<Storage> = (0..10)
            .map(|k| get_or_insert(&cache, k, || Storage::from_vec(vec![0])))
            .collect();
        for k in 10..1000 {
            get_or_insert(&cache, k, || Storage::from_vec(vec![0]));
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
                        get_or_insert(&cache, "key", || {
                            made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            Storage::from_vec(vec![7; 16])
                        })
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(storages.windows(2).all(|w| w[0].same_as(&w[1])));
    }
}
