//! The decoder's memo: keys as the pickle gives them, values arena ids.
//!
//! Picklers number memo entries 0, 1, 2, ... (`MEMOIZE` takes the memo's
//! size as its key), so nearly every key is small and dense: those live in
//! a vector indexed by key, which costs neither hashing nor rehashing. Keys
//! come from the input, though, and one `LONG_BINPUT` may name 4 billion:
//! keys past a bounded dense range go to a hash map with a keyed hash,
//! which hostile keys cannot make slow.

use std::collections::HashMap;

use crate::pickle::NodeId;

/// Keys below this are indexed directly; the vector never holds more slots.
const DENSE_KEYS: u64 = 1 << 16;

#[derive(Debug, Default)]
pub(super) struct Memo {
    dense: Vec<Option<NodeId>>,
    sparse: HashMap<u64, NodeId>,
    len: usize,
}

impl Memo {
    /// A memo with dense room for keys below `keys`.
    pub(super) fn with_capacity(keys: usize) -> Self {
        Self {
            dense: Vec::with_capacity(keys.min(DENSE_KEYS as usize)),
            ..Self::default()
        }
    }

    /// How many keys hold an entry.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn get(&self, key: u64) -> Option<NodeId> {
        match usize::try_from(key) {
            Ok(index) if key < DENSE_KEYS => self.dense.get(index).copied().flatten(),
            _ => self.sparse.get(&key).copied(),
        }
    }

    pub(super) fn contains(&self, key: u64) -> bool {
        self.get(key).is_some()
    }

    /// Stores `id` under `key`, replacing what was there.
    pub(super) fn insert(&mut self, key: u64, id: NodeId) {
        let replaced = match usize::try_from(key) {
            Ok(index) if key < DENSE_KEYS => {
                if self.dense.len() <= index {
                    self.dense.resize(index + 1, None);
                }
                self.dense
                    .get_mut(index)
                    .and_then(|slot| slot.replace(id))
                    .is_some()
            }
            _ => self.sparse.insert(key, id).is_some(),
        };
        if !replaced {
            self.len += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(pickle: &mut crate::pickle::Pickle) -> NodeId {
        pickle.push(crate::pickle::Node::None)
    }

    #[test]
    fn dense_and_sparse_keys_count_once_and_replace() {
        let mut pickle = crate::pickle::Pickle::new();
        let (a, b) = (id(&mut pickle), id(&mut pickle));
        let mut memo = Memo::default();
        for key in [0, 7, DENSE_KEYS - 1, DENSE_KEYS, u64::MAX] {
            assert!(!memo.contains(key));
            memo.insert(key, a);
            assert_eq!(memo.get(key), Some(a));
            memo.insert(key, b);
            assert_eq!(memo.get(key), Some(b));
        }
        assert_eq!(memo.len(), 5);
        assert_eq!(memo.get(1), None);
        assert_eq!(memo.get(DENSE_KEYS + 1), None);
        assert!(memo.dense.len() <= DENSE_KEYS as usize);
    }
}
