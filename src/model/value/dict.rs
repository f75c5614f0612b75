//! Building a Python `dict` in insertion order.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::{Attributes, Value};

/// A Python `dict` being built, in insertion order: what a message of
/// named parts (`{'image': ..., 'label': ...}`) is made of. It becomes a
/// [`Value::Dict`] through `From` (or a `collections.OrderedDict` through
/// [`into_ordered_dict`](Self::into_ordered_dict)).
///
/// Keys and values are anything that converts into a [`Value`]. Setting a
/// `str`, `int` or `bool` key again replaces its value in place, as
/// Python's `d[key] = value` does (`True` is the key `1`); keys of other
/// types are kept as given.
///
/// # Examples
///
/// ```
/// use tensorshare::{Dict, StrategyKind, Tensor, Value};
///
/// let image = Tensor::from_slice(&StrategyKind::Bytes, &[0u8; 12], &[3, 2, 2])?;
/// let batch = Value::from(
///     Dict::new()
///         .with("image", &image)
///         .with("label", 7)
///         .with("boxes", vec![(0.0, 0.0, 1.0, 1.0)])
///         .with("source", None::<String>),
/// );
/// assert!(batch.get("image").and_then(Value::as_tensor).is_some_and(|t| t.same_as(&image)));
/// assert_eq!(batch.try_get::<i64>("label")?, 7);
///
/// // From any iterator of pairs: an IndexMap, a Vec, a zip.
/// let names: Dict = ["a", "b"].into_iter().zip([1, 2]).collect();
/// assert_eq!(Value::from(names).try_get::<i64>("b")?, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
pub struct Dict {
    pairs: Vec<(Value, Value)>,
    /// Where each `str` and `int` key is in `pairs`.
    index: HashMap<ScalarKey, usize>,
}

/// A key Python compares by value: a `str`, or an `int` (a `bool` is the
/// int 0 or 1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum ScalarKey {
    Str(Arc<str>),
    Int(i64),
}

impl ScalarKey {
    fn of(key: &Value) -> Option<ScalarKey> {
        match key {
            Value::Str(s) => Some(ScalarKey::Str(s.clone())),
            Value::Int(_) | Value::Bool(_) => key.as_int().map(ScalarKey::Int),
            _ => None,
        }
    }
}

impl Dict {
    /// An empty dict.
    pub fn new() -> Self {
        Self::default()
    }

    /// The dict with `value` set under `key`, for chaining.
    #[must_use]
    pub fn with(mut self, key: impl Into<Value>, value: impl Into<Value>) -> Self {
        self.insert(key, value);
        self
    }

    /// Sets `value` under `key`: replaces the value of an equal `str`,
    /// `int` or `bool` key in place and returns the old one, or appends
    /// the item.
    pub fn insert(&mut self, key: impl Into<Value>, value: impl Into<Value>) -> Option<Value> {
        let key = key.into();
        let value = value.into();
        if let Some(scalar) = ScalarKey::of(&key) {
            if let Some(&at) = self.index.get(&scalar) {
                return self
                    .pairs
                    .get_mut(at)
                    .map(|(_, old)| std::mem::replace(old, value));
            }
            self.index.insert(scalar, self.pairs.len());
        }
        self.pairs.push((key, value));
        None
    }

    /// The value under the str `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        let at = self.index.get(&ScalarKey::Str(key.into()))?;
        self.pairs.get(*at).map(|(_, value)| value)
    }

    /// The number of items.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether the dict has no items.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The items, in insertion order.
    pub fn items(&self) -> &[(Value, Value)] {
        &self.pairs
    }

    /// The dict as a `collections.OrderedDict` (what `state_dict()` returns).
    pub fn into_ordered_dict(self) -> Value {
        Value::OrderedDict(self.pairs.into(), Attributes::default())
    }
}

/// The items, as a map.
impl fmt::Debug for Dict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.pairs.iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

/// A Python `dict`.
impl From<Dict> for Value {
    fn from(dict: Dict) -> Self {
        Value::Dict(dict.pairs.into())
    }
}

impl<K: Into<Value>, V: Into<Value>> Extend<(K, V)> for Dict {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, items: I) {
        for (key, value) in items {
            self.insert(key, value);
        }
    }
}

impl<K: Into<Value>, V: Into<Value>> FromIterator<(K, V)> for Dict {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(items: I) -> Self {
        let mut dict = Dict::new();
        dict.extend(items);
        dict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setting_a_key_again_replaces_its_value_in_place() {
        let mut dict = Dict::new().with("a", 1).with("b", 2).with(1, "one");
        assert_eq!(dict.insert("a", 3).and_then(|old| old.as_int()), Some(1));
        // True == 1 in Python: the same key.
        assert_eq!(
            dict.insert(true, "true")
                .and_then(|old| old.as_str().map(String::from)),
            Some("one".into())
        );
        // Tuples are kept as given.
        dict.insert((1, 2), 0);
        dict.insert((1, 2), 1);
        let keys: Vec<String> = dict
            .items()
            .iter()
            .map(|(k, _)| super::super::error::key_repr(k))
            .collect();
        assert_eq!(keys, ["'a'", "'b'", "1", "<tuple>", "<tuple>"]);
        assert_eq!(dict.get("a").and_then(Value::as_int), Some(3));
        assert_eq!(dict.len(), 5);
        assert!(format!("{dict:?}").starts_with(r#"{Str("a"): Int(3), Str("b"): Int(2)"#));
        let value = Value::from(dict);
        assert_eq!(value.get("a").and_then(Value::as_int), Some(3));
    }

    #[test]
    fn an_ordered_dict_keeps_its_type() {
        let value = Dict::new().with("weight", 1.5).into_ordered_dict();
        assert_eq!(value.type_name(), "OrderedDict");
        assert_eq!(value.get("weight").and_then(Value::as_float), Some(1.5));
    }
}
