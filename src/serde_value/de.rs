//! A serde `Deserializer` over a [`Value`]: a Python object read as a
//! Rust type (see [`from_value`](super::from_value)).

use std::cell::Cell;
use std::sync::Arc;

use serde::de::value::{I64Deserializer, U8Deserializer};
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, Expected, MapAccess, SeqAccess, VariantAccess,
    Visitor,
};

use super::error::{KeyText, PathSegment, SerdeError, SerdeErrorKind};
use super::passed::{self, PASSED_KEY, PASSED_NAME, PassedMap};
use crate::model::Value;

/// The deepest nesting of containers followed.
pub(crate) const MAX_DEPTH: usize = 128;
/// Items read before the budget below is worked out.
const FREE_ITEMS: usize = 1 << 20;
/// Items read per value of the graph, counting each shared one once.
const ITEMS_PER_VALUE: usize = 16;

/// What one `from_value` call has read: shared containers are read once
/// per reference, so a small graph can expand without bound (a list
/// referencing one list twice, a hundred levels deep). Past
/// [`FREE_ITEMS`] items, the call may read [`ITEMS_PER_VALUE`] per value
/// of the graph it was given.
pub(crate) struct Budget<'de> {
    root: &'de Value,
    read: Cell<usize>,
    limit: Cell<Option<usize>>,
}

impl<'de> Budget<'de> {
    pub(crate) fn new(root: &'de Value) -> Self {
        Budget {
            root,
            read: Cell::new(0),
            limit: Cell::new(None),
        }
    }

    fn spend(&self) -> Result<(), SerdeError> {
        let read = self.read.get() + 1;
        self.read.set(read);
        if read <= FREE_ITEMS {
            return Ok(());
        }
        let limit = match self.limit.get() {
            Some(limit) => limit,
            None => {
                let values = self.root.distinct().count();
                let limit = values.saturating_mul(ITEMS_PER_VALUE).max(FREE_ITEMS);
                self.limit.set(Some(limit));
                limit
            }
        };
        if read > limit {
            return Err(SerdeError::new(SerdeErrorKind::TooLarge { limit }));
        }
        Ok(())
    }
}

/// Reads one value of the graph.
pub(crate) struct ValueDeserializer<'de, 'b> {
    value: &'de Value,
    budget: &'b Budget<'de>,
    depth: usize,
}

impl<'de, 'b> ValueDeserializer<'de, 'b> {
    pub(crate) fn root(budget: &'b Budget<'de>) -> Self {
        ValueDeserializer {
            value: budget.root,
            budget,
            depth: 0,
        }
    }

    fn mismatch(&self, expected: &dyn Expected) -> SerdeError {
        SerdeError::mismatch(expected, self.value)
    }

    /// Items of a sequence.
    fn items(&self) -> Option<Items<'de>> {
        match self.value {
            Value::Tuple(items)
            | Value::List(items)
            | Value::Set(items)
            | Value::FrozenSet(items) => Some(Items::Values(items)),
            Value::Size(dims) => Some(Items::Ints(dims)),
            Value::Bytes(bytes) => Some(Items::Bytes(bytes.as_slice())),
            Value::ByteArray(bytes) => Some(Items::Bytes(bytes)),
            _ => None,
        }
    }

    /// The pairs of a dict.
    fn pairs(&self) -> Result<Option<&'de [(Value, Value)]>, SerdeError> {
        match self.value {
            Value::Dict(pairs) | Value::OrderedDict(pairs, _) => {
                if let Some((Value::Str(key), _)) = pairs.first()
                    && &**key == PASSED_KEY
                {
                    return Err(SerdeError::custom(format!(
                        "the dict key {PASSED_KEY:?} is tensorshare's own"
                    )));
                }
                Ok(Some(pairs))
            }
            _ => Ok(None),
        }
    }

    fn container(&self) -> Result<Container<'de, 'b>, SerdeError> {
        if self.depth >= MAX_DEPTH {
            return Err(SerdeError::new(SerdeErrorKind::TooDeep {
                limit: MAX_DEPTH,
            }));
        }
        Ok(Container {
            budget: self.budget,
            depth: self.depth + 1,
        })
    }

    fn visit_items<V: Visitor<'de>>(
        &self,
        items: Items<'de>,
        visitor: V,
        expected: Option<&dyn Fn() -> String>,
    ) -> Result<V::Value, SerdeError> {
        let mut access = ItemAccess {
            items,
            index: 0,
            container: self.container()?,
        };
        let value = visitor.visit_seq(&mut access)?;
        let total = access.index + access.items.len();
        if access.items.len() != 0 {
            let expected = match expected {
                Some(expected) => expected(),
                None => format!("{} items", access.index),
            };
            return Err(SerdeError::new(SerdeErrorKind::Length {
                expected,
                found: total,
            }));
        }
        Ok(value)
    }

    fn visit_pairs<V: Visitor<'de>>(
        &self,
        pairs: &'de [(Value, Value)],
        visitor: V,
    ) -> Result<V::Value, SerdeError> {
        visitor.visit_map(PairAccess {
            pairs: pairs.iter(),
            value: None,
            container: self.container()?,
        })
    }

    /// Hands the visitor a registered value: tensors, storages and the
    /// other Python objects serde has no type for.
    fn visit_passed<V: Visitor<'de>>(&self, visitor: V) -> Result<V::Value, SerdeError> {
        visitor.visit_map(PassedMap::new(passed::register(self.value)))
    }

    fn visit_int<V: Visitor<'de>>(&self, visitor: V) -> Result<V::Value, SerdeError> {
        match self.value {
            Value::Int(i) => visitor.visit_i64(*i),
            // The narrowest visit that holds it: serde's 64-bit visitors
            // take no 128-bit ints.
            Value::BigInt(le) => match big_int(le) {
                Some(i) => match (i64::try_from(i), u64::try_from(i)) {
                    (Ok(i), _) => visitor.visit_i64(i),
                    (_, Ok(u)) => visitor.visit_u64(u),
                    _ => visitor.visit_i128(i),
                },
                None => match big_uint(le) {
                    Some(u) => visitor.visit_u128(u),
                    None => Err(self.mismatch(&visitor)),
                },
            },
            _ => Err(self.mismatch(&visitor)),
        }
    }
}

/// `le` without top bytes that only repeat the sign of the byte below
/// (pickle writes none, but may be given some).
fn trimmed(mut le: &[u8]) -> &[u8] {
    while let [rest @ .., below, top] = le {
        let redundant = (*top == 0 && below & 0x80 == 0) || (*top == 0xff && below & 0x80 != 0);
        if !redundant {
            break;
        }
        le = &le[..rest.len() + 1];
    }
    le
}

/// A little-endian two's complement int that fits in 128 bits.
fn big_int(le: &[u8]) -> Option<i128> {
    let le = trimmed(le);
    if le.len() > 16 {
        return None;
    }
    let negative = le.last().is_some_and(|b| b & 0x80 != 0);
    let mut wide = [if negative { 0xff } else { 0 }; 16];
    wide.get_mut(..le.len())?.copy_from_slice(le);
    Some(i128::from_le_bytes(wide))
}

/// A positive int above `i128::MAX` that fits in 128 bits: 17 bytes, the
/// top one zero.
fn big_uint(le: &[u8]) -> Option<u128> {
    match trimmed(le) {
        [low @ .., 0] if low.len() == 16 => Some(u128::from_le_bytes(low.try_into().ok()?)),
        _ => None,
    }
}

/// What a container's items are read with: one level deeper, on the same
/// budget.
struct Container<'de, 'b> {
    budget: &'b Budget<'de>,
    depth: usize,
}

impl<'de, 'b> Container<'de, 'b> {
    fn item(&self, value: &'de Value) -> Result<ValueDeserializer<'de, 'b>, SerdeError> {
        self.budget.spend()?;
        Ok(ValueDeserializer {
            value,
            budget: self.budget,
            depth: self.depth,
        })
    }
}

/// The items of a sequence: values, a `torch.Size`'s ints, or the bytes
/// of a `bytes` read as ints, as iterating one in Python gives.
enum Items<'de> {
    Values(&'de [Value]),
    Ints(&'de [i64]),
    Bytes(&'de [u8]),
}

impl Items<'_> {
    fn len(&self) -> usize {
        match self {
            Items::Values(items) => items.len(),
            Items::Ints(items) => items.len(),
            Items::Bytes(items) => items.len(),
        }
    }
}

struct ItemAccess<'de, 'b> {
    items: Items<'de>,
    index: usize,
    container: Container<'de, 'b>,
}

impl<'de> SeqAccess<'de> for &mut ItemAccess<'de, '_> {
    type Error = SerdeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, SerdeError> {
        let index = self.index;
        let at = |e: SerdeError| e.at(PathSegment::Index(index));
        let item = match &mut self.items {
            Items::Values(items) => {
                let Some((first, rest)) = items.split_first() else {
                    return Ok(None);
                };
                *items = rest;
                let item = self.container.item(first).map_err(at)?;
                seed.deserialize(item)
            }
            Items::Ints(items) => {
                let Some((first, rest)) = items.split_first() else {
                    return Ok(None);
                };
                *items = rest;
                self.container.budget.spend().map_err(at)?;
                seed.deserialize(I64Deserializer::<SerdeError>::new(*first))
            }
            Items::Bytes(items) => {
                let Some((first, rest)) = items.split_first() else {
                    return Ok(None);
                };
                *items = rest;
                self.container.budget.spend().map_err(at)?;
                seed.deserialize(U8Deserializer::<SerdeError>::new(*first))
            }
        };
        self.index += 1;
        item.map(Some).map_err(at)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct PairAccess<'de, 'b> {
    pairs: std::slice::Iter<'de, (Value, Value)>,
    /// The value of the key just read.
    value: Option<&'de (Value, Value)>,
    container: Container<'de, 'b>,
}

impl<'de> MapAccess<'de> for PairAccess<'de, '_> {
    type Error = SerdeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, SerdeError> {
        let Some(pair) = self.pairs.next() else {
            return Ok(None);
        };
        self.value = Some(pair);
        let at = |e: SerdeError| {
            if e.names_its_key() {
                e
            } else {
                e.at(PathSegment::KeyItself(KeyText::of(&pair.0)))
            }
        };
        let key = self.container.item(&pair.0).map_err(at)?;
        seed.deserialize(key).map(Some).map_err(at)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, SerdeError> {
        let pair = self
            .value
            .take()
            .ok_or_else(|| SerdeError::custom("a dict value was read before its key"))?;
        let at = |e: SerdeError| e.at(PathSegment::Key(KeyText::of(&pair.0)));
        let value = self.container.item(&pair.1).map_err(at)?;
        seed.deserialize(value).map_err(at)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.pairs.len())
    }
}

/// An enum: a `str` for a unit variant, a one-key dict
/// `{variant: content}` for the others.
struct VariantOf<'de, 'b> {
    name: &'de Value,
    content: Option<ValueDeserializer<'de, 'b>>,
}

impl<'de, 'b> EnumAccess<'de> for VariantOf<'de, 'b> {
    type Error = SerdeError;
    type Variant = VariantContent<'de, 'b>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, VariantContent<'de, 'b>), SerdeError> {
        let Value::Str(name) = self.name else {
            return Err(SerdeError::mismatch(&"a variant name", self.name));
        };
        let variant = seed.deserialize(de::value::BorrowedStrDeserializer::new(name))?;
        Ok((
            variant,
            VariantContent {
                name,
                content: self.content,
            },
        ))
    }
}

struct VariantContent<'de, 'b> {
    name: &'de Arc<str>,
    content: Option<ValueDeserializer<'de, 'b>>,
}

impl<'de, 'b> VariantContent<'de, 'b> {
    fn content(self, expected: &dyn Expected) -> Result<ValueDeserializer<'de, 'b>, SerdeError> {
        self.content.ok_or_else(|| {
            SerdeError::new(SerdeErrorKind::Mismatch {
                expected: expected.to_string(),
                found: "a variant name alone".to_owned(),
            })
        })
    }
}

impl<'de> VariantAccess<'de> for VariantContent<'de, '_> {
    type Error = SerdeError;

    fn unit_variant(self) -> Result<(), SerdeError> {
        match &self.content {
            None => Ok(()),
            Some(content) if matches!(content.value, Value::None) => Ok(()),
            Some(content) => Err(content.mismatch(&"no content for a unit variant")),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, SerdeError> {
        let name = self.name;
        let content = self.content(&"a variant's content")?;
        seed.deserialize(content)
            .map_err(|e| e.at(PathSegment::Key(KeyText::Str(name.to_string()))))
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, SerdeError> {
        let name = self.name;
        let content = self.content(&visitor)?;
        content
            .deserialize_tuple(len, visitor)
            .map_err(|e| e.at(PathSegment::Key(KeyText::Str(name.to_string()))))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, SerdeError> {
        let name = self.name;
        let at = |e: SerdeError| e.at(PathSegment::Key(KeyText::Str(name.to_string())));
        let content = self.content(&visitor)?;
        content.deserialize_struct("", fields, visitor).map_err(at)
    }
}

/// Integer methods: any `int`, the visitor judges the range.
macro_rules! deserialize_ints {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SerdeError> {
                self.visit_int(visitor).map_err(|e| e.found_here(self.value))
            }
        )*
    };
}

impl<'de> Deserializer<'de> for ValueDeserializer<'de, '_> {
    type Error = SerdeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SerdeError> {
        let value = self.value;
        let result = match value {
            Value::None => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Int(i) => visitor.visit_i64(*i),
            Value::BigInt(le) if big_int(le).is_some() || big_uint(le).is_some() => {
                self.visit_int(visitor)
            }
            // An int past 128 bits: only a `Value` takes it.
            Value::BigInt(_) => self.visit_passed(visitor),
            Value::Float(f) => visitor.visit_f64(*f),
            Value::Str(s) => visitor.visit_borrowed_str(s),
            Value::Bytes(bytes) => visitor.visit_borrowed_bytes(bytes.as_slice()),
            Value::ByteArray(bytes) => visitor.visit_borrowed_bytes(bytes),
            Value::Tuple(_)
            | Value::List(_)
            | Value::Set(_)
            | Value::FrozenSet(_)
            | Value::Size(_) => match self.items() {
                Some(items) => self.visit_items(items, visitor, None),
                None => Err(self.mismatch(&visitor)),
            },
            Value::Dict(_) | Value::OrderedDict(..) => match self.pairs()? {
                Some(pairs) => self.visit_pairs(pairs, visitor),
                None => Err(self.mismatch(&visitor)),
            },
            Value::Tensor(_)
            | Value::Storage(_)
            | Value::TypedStorage(..)
            | Value::DType(_)
            | Value::Global(_)
            | Value::Callable(_)
            | Value::Custom(_)
            | Value::Opaque(_) => self.visit_passed(visitor),
        };
        result.map_err(|e| e.found_here(value))
    }

    deserialize_ints! {
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SerdeError> {
        match self.value {
            Value::Bool(b) => visitor.visit_bool(*b),
            _ => Err(self.mismatch(&visitor)),
        }
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SerdeError> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SerdeError> {
        match self.value {
            Value::Float(f) => visitor.visit_f64(*f),
            // As Python's float(int), rounding past 2**53.
            Value::Int(i) => visitor.visit_f64(*i as f64),
            _ => Err(self.mismatch(&visitor)),
        }
        .map_err(|e| e.found_here(self.value))
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SerdeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SerdeError> {
        match self.value {
            Value::Str(s) => visitor.visit_borrowed_str(s),
            _ => Err(self.mismatch(&visitor)),
        }
        .map_err(|e| e.found_here(self.value))
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SerdeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SerdeError> {
        let value = self.value;
        let result: Result<V::Value, SerdeError> = match value {
            Value::Bytes(bytes) => visitor.visit_borrowed_bytes(bytes.as_slice()),
            Value::ByteArray(bytes) => visitor.visit_borrowed_bytes(bytes),
            // A list of ints, or a str, for the visitors that take them.
            _ => return self.deserialize_any(visitor),
        };
        result.map_err(|e| e.found_here(value))
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SerdeError> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SerdeError> {
        match self.value {
            Value::None => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SerdeError> {
        match self.value {
            Value::None => visitor.visit_unit(),
            _ => Err(self.mismatch(&visitor)),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, SerdeError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, SerdeError> {
        if name == PASSED_NAME {
            return self
                .visit_passed(visitor)
                .map_err(|e| e.found_here(self.value));
        }
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SerdeError> {
        match self.items() {
            Some(items) => self.visit_items(items, visitor, None),
            None => Err(self.mismatch(&visitor)),
        }
        .map_err(|e| e.found_here(self.value))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, SerdeError> {
        let expected = || format!("a tuple of size {len}");
        match self.items() {
            Some(items) => self.visit_items(items, visitor, Some(&expected)),
            None => Err(self.mismatch(&visitor)),
        }
        .map_err(|e| e.found_here(self.value))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, SerdeError> {
        let expected = || format!("tuple struct {name} of size {len}");
        match self.items() {
            Some(items) => self.visit_items(items, visitor, Some(&expected)),
            None => Err(self.mismatch(&visitor)),
        }
        .map_err(|e| e.found_here(self.value))
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SerdeError> {
        match self.pairs()? {
            Some(pairs) => self.visit_pairs(pairs, visitor),
            None => Err(self.mismatch(&visitor)),
        }
        .map_err(|e| e.found_here(self.value))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, SerdeError> {
        let result = match self.pairs()? {
            Some(pairs) => self.visit_pairs(pairs, visitor),
            None => Err(self.mismatch(&visitor)),
        };
        result.map_err(|e| {
            let e = e.found_here(self.value);
            if name.is_empty() {
                e
            } else {
                e.in_struct(name)
            }
        })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, SerdeError> {
        let access = match self.value {
            Value::Str(_) => VariantOf {
                name: self.value,
                content: None,
            },
            Value::Dict(pairs) | Value::OrderedDict(pairs, _) if pairs.len() == 1 => {
                let (name, content) = &pairs[0];
                let content = self.container()?.item(content)?;
                VariantOf {
                    name,
                    content: Some(content),
                }
            }
            _ => return Err(self.mismatch(&visitor)),
        };
        visitor
            .visit_enum(access)
            .map_err(|e| e.found_here(self.value))
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SerdeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SerdeError> {
        // Read nothing: an ignored part costs no budget.
        visitor.visit_unit()
    }
}
