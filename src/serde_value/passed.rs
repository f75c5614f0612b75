//! `Serialize` and `Deserialize` for [`Tensor`], [`Storage`] and
//! [`Value`]: passed through whole by tensorshare's own serializer and
//! deserializer, refused by every other.
//!
//! serde's data model has no place for a tensor, so they travel beside it.
//! Serializing, one names a newtype struct [`PASSED_NAME`], which
//! [`ValueSerializer`](super::ser::ValueSerializer) alone recognizes: it
//! arms a thread-local slot and serializes the newtype's content, which
//! puts the value in the slot when, and only when, the slot is armed; any
//! other serializer serializes that content unarmed and gets an error
//! saying to convert through [`to_value`](super::to_value) instead.
//!
//! Deserializing, our deserializer registers the value in a thread-local
//! table that lives as long as the [`from_value`](super::from_value) call
//! and hands the visitor a one-key map `{PASSED_KEY: index}`. That is
//! plain serde data, so it survives serde's buffering of
//! `#[serde(flatten)]` fields and untagged enums, which take the value
//! through `deserialize_any` and replay it later. A dict key equal to
//! [`PASSED_KEY`] is refused by our deserializer, so a peer's data cannot
//! name a registered value.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::sync::Arc;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{self, Serializer};
use serde::{Deserialize, Serialize};
use tensorshare_compat::pickle::SharedBytes;

use super::error::SerdeError;
use super::ser::ValueSerializer;
use crate::model::{Storage, Tensor, Value};

/// The newtype struct name under which a value passes through.
pub(crate) const PASSED_NAME: &str = "$tensorshare::private::Passed";
/// The one key of the map that refers to a registered value.
pub(crate) const PASSED_KEY: &str = "$tensorshare::private::passed";

thread_local! {
    /// Set by our serializer right before it serializes a passed value's
    /// content; cleared by that content as it takes the value.
    static ARMED: Cell<bool> = const { Cell::new(false) };
    /// The value the armed content handed over.
    static CAPTURED: RefCell<Option<Value>> = const { RefCell::new(None) };
    /// The values passed to deserializers during the `from_value` calls
    /// under way on this thread.
    static REGISTERED: RefCell<Vec<Value>> = const { RefCell::new(Vec::new()) };
}

/// Serializes `content`, the content of a newtype struct named
/// [`PASSED_NAME`], with the slot armed, and returns the value it handed
/// over.
pub(crate) fn capture<T: ?Sized + Serialize>(content: &T) -> Result<Value, SerdeError> {
    /// Disarms the slot however the content's code returns, a panic too:
    /// an armed slot would hand the next tensor to whatever serializer
    /// comes next.
    struct Armed;
    impl Drop for Armed {
        fn drop(&mut self) {
            ARMED.set(false);
        }
    }
    let armed = Armed;
    ARMED.set(true);
    let serialized = content.serialize(ValueSerializer);
    drop(armed);
    let captured = CAPTURED.take();
    serialized?;
    captured.ok_or_else(|| {
        SerdeError::custom(format!(
            "the newtype struct name {PASSED_NAME:?} is tensorshare's own; \
             name your type otherwise"
        ))
    })
}

/// The registrations of one `from_value` call: dropped, it forgets them.
pub(crate) struct Registrations {
    start: usize,
}

impl Registrations {
    pub(crate) fn begin() -> Self {
        Registrations {
            start: REGISTERED.with_borrow(Vec::len),
        }
    }
}

impl Drop for Registrations {
    fn drop(&mut self) {
        REGISTERED.with_borrow_mut(|values| values.truncate(self.start));
    }
}

/// Registers `value` for the visitor about to receive it; returns its
/// index.
pub(crate) fn register(value: &Value) -> u64 {
    REGISTERED.with_borrow_mut(|values| {
        values.push(value.clone());
        (values.len() - 1) as u64
    })
}

fn registered(index: u64) -> Option<Value> {
    let index = usize::try_from(index).ok()?;
    REGISTERED.with_borrow(|values| values.get(index).cloned())
}

/// The map our deserializer hands a visitor for a passed value:
/// `{PASSED_KEY: index}`.
pub(crate) struct PassedMap {
    index: Option<u64>,
    key_given: bool,
}

impl PassedMap {
    pub(crate) fn new(index: u64) -> Self {
        PassedMap {
            index: Some(index),
            key_given: false,
        }
    }
}

impl<'de> MapAccess<'de> for PassedMap {
    type Error = SerdeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, SerdeError> {
        if self.key_given {
            return Ok(None);
        }
        self.key_given = true;
        seed.deserialize(de::value::StrDeserializer::new(PASSED_KEY))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, SerdeError> {
        let index = self
            .index
            .take()
            .ok_or_else(|| SerdeError::custom("a passed value's index was read twice"))?;
        seed.deserialize(de::value::U64Deserializer::new(index))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(usize::from(!self.key_given))
    }
}

/// What a type passed through is.
#[derive(Clone, Copy)]
enum Passed {
    Tensor,
    Storage,
    Value,
}

impl Passed {
    fn name(self) -> &'static str {
        match self {
            Passed::Tensor => "Tensor",
            Passed::Storage => "Storage",
            Passed::Value => "Value",
        }
    }

    fn serialize_refused(self) -> String {
        format!(
            "a tensorshare {} serializes only into a tensorshare Value \
             (tensorshare::to_value); to write it in another format, convert it \
             to plain data first",
            self.name()
        )
    }

    fn deserialize_refused(self) -> String {
        format!(
            "a tensorshare {} deserializes only from a tensorshare Value \
             (tensorshare::from_value)",
            self.name()
        )
    }
}

/// A passed value's newtype content: hands the value over when armed.
struct Handover<'a> {
    passed: Passed,
    value: Lent<'a>,
}

enum Lent<'a> {
    Tensor(&'a Tensor),
    Storage(&'a Storage),
    Value(&'a Value),
}

impl Serialize for Handover<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if !ARMED.replace(false) {
            return Err(ser::Error::custom(self.passed.serialize_refused()));
        }
        let value = match self.value {
            Lent::Tensor(tensor) => Value::Tensor(tensor.clone()),
            Lent::Storage(storage) => Value::Storage(storage.clone()),
            Lent::Value(value) => value.clone(),
        };
        CAPTURED.set(Some(value));
        serializer.serialize_unit()
    }
}

fn serialize_passed<S: Serializer>(
    serializer: S,
    passed: Passed,
    value: Lent<'_>,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_newtype_struct(PASSED_NAME, &Handover { passed, value })
}

/// Passed through whole into a [`Value`] by [`to_value`](crate::to_value);
/// any other serializer fails with an error saying so.
impl Serialize for Tensor {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_passed(serializer, Passed::Tensor, Lent::Tensor(self))
    }
}

/// Passed through whole as a `torch.UntypedStorage` by
/// [`to_value`](crate::to_value); any other serializer fails with an error
/// saying so.
impl Serialize for Storage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_passed(serializer, Passed::Storage, Lent::Storage(self))
    }
}

/// Passed through whole, shared parts and tuples included, by
/// [`to_value`](crate::to_value): a field of type `Value` holds any
/// Python object. Any other serializer fails with an error saying so.
impl Serialize for Value {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_passed(serializer, Passed::Value, Lent::Value(self))
    }
}

/// Reads the map `{PASSED_KEY: index}` and returns what was registered
/// there, whatever its type.
struct PassedVisitor(Passed);

impl<'de> Visitor<'de> for PassedVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Passed::Tensor => f.write_str("a Tensor"),
            Passed::Storage => f.write_str("a storage"),
            Passed::Value => f.write_str("a Python object"),
        }
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let refused = || de::Error::custom(self.0.deserialize_refused());
        match map.next_key::<ValueKey>()? {
            Some(ValueKey::Passed) => {}
            _ => return Err(refused()),
        }
        let index: u64 = map.next_value()?;
        let value = registered(index).ok_or_else(refused)?;
        // Judged here, inside the deserializer's call, which then
        // describes what the value is instead.
        let fits = match self.0 {
            Passed::Tensor => matches!(value, Value::Tensor(_)),
            Passed::Storage => matches!(value, Value::Storage(_) | Value::TypedStorage(..)),
            Passed::Value => true,
        };
        if !fits {
            return Err(de::Error::invalid_type(
                de::Unexpected::Other(value.type_name()),
                &self,
            ));
        }
        Ok(value)
    }
}

/// The first key of a map a passed value's visitor reads.
enum ValueKey {
    Passed,
    Other(Value),
}

impl<'de> Deserialize<'de> for ValueKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let key = d.deserialize_any(ValueVisitor)?;
        Ok(match key {
            Value::Str(s) if &*s == PASSED_KEY => ValueKey::Passed,
            other => ValueKey::Other(other),
        })
    }
}

fn not_passed<E: de::Error>(value: &Value, passed: Passed) -> E {
    E::invalid_type(
        de::Unexpected::Other(value.type_name()),
        &PassedVisitor(passed),
    )
}

/// The value is a tensor, or the deserializer says what it is instead
/// (`expected a Tensor, found str 'a'`).
impl<'de> Deserialize<'de> for Tensor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match d.deserialize_newtype_struct(PASSED_NAME, PassedVisitor(Passed::Tensor))? {
            Value::Tensor(tensor) => Ok(tensor),
            // The visitor took only a tensor.
            other => Err(not_passed(&other, Passed::Tensor)),
        }
    }
}

/// An untyped or typed storage (`torch.UntypedStorage`,
/// `torch.TypedStorage`, a legacy class such as `torch.FloatStorage`): its
/// bytes, the dtype of a typed one dropped.
impl<'de> Deserialize<'de> for Storage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match d.deserialize_newtype_struct(PASSED_NAME, PassedVisitor(Passed::Storage))? {
            Value::Storage(storage) | Value::TypedStorage(storage, _) => Ok(storage),
            other => Err(not_passed(&other, Passed::Storage)),
        }
    }
}

/// Any Python object, taken whole from [`from_value`](crate::from_value)'s
/// value (shared parts, tuples and tensors as they are). From another
/// format, the value its data makes: `None`, bools, ints, floats, `str`,
/// `bytes`, lists and dicts.
impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_newtype_struct(PASSED_NAME, ValueVisitor)
    }
}

/// Builds a [`Value`] from serde data, or takes a registered one.
struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Python object")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        i128::serialize(&v, ValueSerializer).map_err(de::Error::custom)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        u64::serialize(&v, ValueSerializer).map_err(de::Error::custom)
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        u128::serialize(&v, ValueSerializer).map_err(de::Error::custom)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(Arc::from(v)))
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Value, E> {
        Ok(Value::Bytes(SharedBytes::from(v)))
    }

    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Value, E> {
        Ok(Value::Bytes(SharedBytes::from(v)))
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element_seed(AnyValue)? {
            items.push(item);
        }
        Ok(Value::List(items.into()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let first = match map.next_key::<ValueKey>()? {
            None => return Ok(Value::Dict(Arc::new([]))),
            Some(ValueKey::Passed) => {
                let index: u64 = map.next_value()?;
                return registered(index)
                    .ok_or_else(|| de::Error::custom(Passed::Value.deserialize_refused()));
            }
            Some(ValueKey::Other(key)) => key,
        };
        let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096) + 1);
        pairs.push((first, map.next_value_seed(AnyValue)?));
        while let Some(key) = map.next_key_seed(AnyValue)? {
            pairs.push((key, map.next_value_seed(AnyValue)?));
        }
        Ok(Value::Dict(pairs.into()))
    }
}

/// A value inside one being built: whatever the data is, through
/// `deserialize_any`.
struct AnyValue;

impl<'de> DeserializeSeed<'de> for AnyValue {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}
