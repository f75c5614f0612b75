//! A map whose entries also leave oldest first: segments the pool parks
//! while receivers still map them, and mappings a receiver keeps dormant.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::Instant;

/// Entries by key, and the order they came in.
///
/// Removing by key leaves a stale place in the queue; a stamp per insertion
/// tells a stale place from the entry's current one, so that an entry taken
/// out and put back is not aged by its first place.
#[derive(Debug)]
pub(crate) struct AgingMap<K, V> {
    entries: HashMap<K, (u64, V)>,
    order: VecDeque<(Instant, u64, K)>,
    stamps: u64,
}

impl<K, V> Default for AgingMap<K, V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            order: VecDeque::new(),
            stamps: 0,
        }
    }
}

impl<K: Clone + Eq + Hash, V> AgingMap<K, V> {
    /// Inserts `value` under `key` as of `now`; the value it replaces.
    pub(crate) fn insert(&mut self, key: K, value: V, now: Instant) -> Option<V> {
        self.stamps += 1;
        self.order.push_back((now, self.stamps, key.clone()));
        let replaced = self.entries.insert(key, (self.stamps, value));
        // Places left by entries removed out of order go before they
        // outnumber the entries.
        if self.order.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.order
                .retain(|(_, stamp, key)| entries.get(key).is_some_and(|(s, _)| s == stamp));
        }
        replaced.map(|(_, value)| value)
    }

    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        self.entries.remove(key).map(|(_, value)| value)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The values, in no order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.values().map(|(_, value)| value)
    }

    /// Removes every entry `remove` says to, in no order.
    pub(crate) fn remove_where(&mut self, mut remove: impl FnMut(&V) -> bool) -> Vec<(K, V)> {
        let keys: Vec<K> = self
            .entries
            .iter()
            .filter(|(_, (_, value))| remove(value))
            .map(|(key, _)| key.clone())
            .collect();
        keys.into_iter()
            .filter_map(|key| Some((key.clone(), self.remove(&key)?)))
            .collect()
    }

    /// When the oldest entry came in.
    pub(crate) fn oldest(&mut self) -> Option<Instant> {
        self.drop_stale_front();
        self.order.front().map(|(since, _, _)| *since)
    }

    /// Removes the oldest entry if `over(when it came in, how many
    /// entries there are)` says it is past its time or over a bound.
    pub(crate) fn pop_oldest_if(
        &mut self,
        over: impl FnOnce(Instant, usize) -> bool,
    ) -> Option<(K, V)> {
        let since = self.oldest()?;
        if !over(since, self.entries.len()) {
            return None;
        }
        self.pop_oldest()
    }

    /// Removes the oldest entry.
    pub(crate) fn pop_oldest(&mut self) -> Option<(K, V)> {
        self.drop_stale_front();
        let (_, _, key) = self.order.pop_front()?;
        let value = self.remove(&key)?;
        Some((key, value))
    }

    fn drop_stale_front(&mut self) {
        while let Some((_, stamp, key)) = self.order.front() {
            if self
                .entries
                .get(key)
                .is_some_and(|(current, _)| current == stamp)
            {
                return;
            }
            self.order.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn entries_leave_oldest_first_by_their_latest_insertion() {
        let start = Instant::now();
        let at = |seconds| start + Duration::from_secs(seconds);
        let mut map = AgingMap::default();
        map.insert('a', 1, at(0));
        map.insert('b', 2, at(1));
        assert_eq!(map.remove(&'a'), Some(1));
        map.insert('a', 3, at(2));
        assert_eq!(map.oldest(), Some(at(1)));
        assert_eq!(map.pop_oldest(), Some(('b', 2)));
        assert_eq!(map.pop_oldest(), Some(('a', 3)));
        assert_eq!((map.pop_oldest(), map.len()), (None, 0));
    }

    #[test]
    fn the_oldest_goes_only_when_asked_to() {
        let start = Instant::now();
        let mut map = AgingMap::default();
        map.insert('a', 1, start);
        map.insert('b', 2, start + Duration::from_secs(1));
        let mut seen = Vec::new();
        while let Some(entry) = map.pop_oldest_if(|since, len| {
            seen.push((since, len));
            len > 1
        }) {
            assert_eq!(entry, ('a', 1));
        }
        assert_eq!(seen, [(start, 2), (start + Duration::from_secs(1), 1)]);
        assert_eq!(map.len(), 1);
    }

    #[test]
    fn stale_places_do_not_pile_up() {
        let now = Instant::now();
        let mut map = AgingMap::default();
        for round in 0..1000 {
            map.insert(round % 3, round, now);
            map.remove(&(round % 3));
        }
        assert!(map.order.len() <= 64 + 1);
    }
}
