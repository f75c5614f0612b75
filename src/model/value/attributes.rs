//! The attributes a pickle sets on an object beside its items.

use std::sync::Arc;

use super::Value;

/// The attributes set on an object beside its items: what the pickle's
/// `BUILD` puts in its `__dict__`. A `state_dict()` carries one,
/// `_metadata`, each submodule's `version`, which `load_state_dict` passes
/// on to `_load_from_state_dict` (BatchNorm and many user modules branch on
/// it): a state dict that loses it no longer loads as the original does.
///
/// Names are `str`, in the order they were first set; setting one again
/// replaces its value in place, as Python's `setattr` does.
///
/// # Examples
///
/// ```
/// use tensorshare::model::Attributes;
/// use tensorshare::{Dict, Value};
///
/// let versions = Dict::new().with("", Dict::new().with("version", 1)).into_ordered_dict();
/// let attributes = Attributes::from_iter([("_metadata", versions)]);
/// let items = [(Value::from("weight"), Value::from(1.5))];
/// let state = Value::OrderedDict(items.into(), attributes);
/// let Value::OrderedDict(_, attributes) = &state else { unreachable!() };
/// let metadata = attributes.get("_metadata").expect("set above");
/// assert_eq!(metadata.get("").and_then(|m| m.get("version")).and_then(Value::as_int), Some(1));
/// ```
#[derive(Clone, Debug, Default)]
pub struct Attributes(Arc<[(Arc<str>, Value)]>);

impl Attributes {
    /// The value of the attribute `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0
            .iter()
            .find(|(set, _)| &**set == name)
            .map(|(_, value)| value)
    }

    /// The attributes, in the order they were first set.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> {
        self.0.iter().map(|(name, value)| (&**name, value))
    }

    /// Whether none is set: an object pickled without `BUILD`.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Sets each attribute in turn: a name set twice keeps its first place and
/// its last value.
impl<N: Into<Arc<str>>, V: Into<Value>> FromIterator<(N, V)> for Attributes {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        let mut set: Vec<(Arc<str>, Value)> = Vec::new();
        for (name, value) in iter {
            let (name, value) = (name.into(), value.into());
            match set.iter_mut().find(|(old, _)| *old == name) {
                Some((_, old)) => *old = value,
                None => set.push((name, value)),
            }
        }
        Self(set.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_set_twice_keeps_its_place_and_its_last_value() {
        let attributes = Attributes::from_iter([("a", 1), ("b", 2), ("a", 3)]);
        let set: Vec<_> = attributes
            .iter()
            .map(|(name, value)| (name, value.as_int()))
            .collect();
        assert_eq!(set, [("a", Some(3)), ("b", Some(2))]);
        assert_eq!(Attributes::default().iter().len(), 0);
    }
}
