//! A serde `Serializer` whose output is a [`Value`]: a Rust value as the
//! Python object torch code expects (see [`to_value`](super::to_value)).

use std::sync::Arc;

use serde::Serialize;
use serde::ser::{self, Serializer};
use tensorshare_compat::pickle::SharedBytes;

use super::error::{KeyText, PathSegment, SerdeError, SerdeErrorKind};
use super::passed;
use crate::model::Value;

/// Serializes into a [`Value`].
pub(crate) struct ValueSerializer;

/// An `int` of any size: an `Int` when it fits in 64 bits, else a
/// `BigInt` of the fewest little-endian two's complement bytes, as
/// pickle's `LONG1` writes it.
fn int(value: i128) -> Value {
    match i64::try_from(value) {
        Ok(small) => Value::Int(small),
        Err(_) => big_int(value.to_le_bytes().to_vec()),
    }
}

fn big_int(mut le: Vec<u8>) -> Value {
    // Drop a top byte that only repeats the sign of the one below it.
    while let [.., below, top] = le[..] {
        let redundant = (top == 0 && below & 0x80 == 0) || (top == 0xff && below & 0x80 != 0);
        if !redundant {
            break;
        }
        le.pop();
    }
    Value::BigInt(le.into())
}

fn unsigned(value: u128) -> Value {
    match i128::try_from(value) {
        Ok(value) => int(value),
        Err(_) => {
            // Above i128::MAX: a zero byte on top keeps it positive.
            let mut le = value.to_le_bytes().to_vec();
            le.push(0);
            big_int(le)
        }
    }
}

/// The Python type of `key` when Python cannot hash it: a dict with such a
/// key does not unpickle.
fn unhashable(key: &Value) -> Option<&'static str> {
    match key {
        Value::List(_)
        | Value::Dict(_)
        | Value::OrderedDict(..)
        | Value::Set(_)
        | Value::ByteArray(_) => Some(key.type_name()),
        Value::Tuple(items) => items.iter().find_map(unhashable),
        _ => None,
    }
}

fn str_value(text: &str) -> Value {
    Value::Str(Arc::from(text))
}

impl Serializer for ValueSerializer {
    type Ok = Value;
    type Error = SerdeError;
    type SerializeSeq = SeqBuilder;
    type SerializeTuple = SeqBuilder;
    type SerializeTupleStruct = SeqBuilder;
    type SerializeTupleVariant = VariantBuilder<SeqBuilder>;
    type SerializeMap = DictBuilder;
    type SerializeStruct = DictBuilder;
    type SerializeStructVariant = VariantBuilder<DictBuilder>;

    fn serialize_bool(self, v: bool) -> Result<Value, SerdeError> {
        Ok(Value::Bool(v))
    }

    fn serialize_i8(self, v: i8) -> Result<Value, SerdeError> {
        Ok(Value::Int(v.into()))
    }

    fn serialize_i16(self, v: i16) -> Result<Value, SerdeError> {
        Ok(Value::Int(v.into()))
    }

    fn serialize_i32(self, v: i32) -> Result<Value, SerdeError> {
        Ok(Value::Int(v.into()))
    }

    fn serialize_i64(self, v: i64) -> Result<Value, SerdeError> {
        Ok(Value::Int(v))
    }

    fn serialize_i128(self, v: i128) -> Result<Value, SerdeError> {
        Ok(int(v))
    }

    fn serialize_u8(self, v: u8) -> Result<Value, SerdeError> {
        Ok(Value::Int(v.into()))
    }

    fn serialize_u16(self, v: u16) -> Result<Value, SerdeError> {
        Ok(Value::Int(v.into()))
    }

    fn serialize_u32(self, v: u32) -> Result<Value, SerdeError> {
        Ok(Value::Int(v.into()))
    }

    fn serialize_u64(self, v: u64) -> Result<Value, SerdeError> {
        Ok(unsigned(v.into()))
    }

    fn serialize_u128(self, v: u128) -> Result<Value, SerdeError> {
        Ok(unsigned(v))
    }

    fn serialize_f32(self, v: f32) -> Result<Value, SerdeError> {
        Ok(Value::Float(v.into()))
    }

    fn serialize_f64(self, v: f64) -> Result<Value, SerdeError> {
        Ok(Value::Float(v))
    }

    fn serialize_char(self, v: char) -> Result<Value, SerdeError> {
        Ok(str_value(v.encode_utf8(&mut [0; 4])))
    }

    fn serialize_str(self, v: &str) -> Result<Value, SerdeError> {
        Ok(str_value(v))
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<Value, SerdeError> {
        Ok(Value::Bytes(SharedBytes::from(v)))
    }

    fn serialize_none(self) -> Result<Value, SerdeError> {
        Ok(Value::None)
    }

    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<Value, SerdeError> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<Value, SerdeError> {
        Ok(Value::None)
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<Value, SerdeError> {
        Ok(Value::None)
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<Value, SerdeError> {
        Ok(str_value(variant))
    }

    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<Value, SerdeError> {
        if name == passed::PASSED_NAME {
            return passed::capture(value);
        }
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<Value, SerdeError> {
        let inner = value
            .serialize(ValueSerializer)
            .map_err(|e| e.at(PathSegment::Variant(variant)))?;
        Ok(Value::Dict(Arc::new([(str_value(variant), inner)])))
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<SeqBuilder, SerdeError> {
        Ok(SeqBuilder::new(len.unwrap_or(0), false))
    }

    fn serialize_tuple(self, len: usize) -> Result<SeqBuilder, SerdeError> {
        Ok(SeqBuilder::new(len, true))
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<SeqBuilder, SerdeError> {
        Ok(SeqBuilder::new(len, true))
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<VariantBuilder<SeqBuilder>, SerdeError> {
        Ok(VariantBuilder {
            variant,
            inner: SeqBuilder::new(len, true),
        })
    }

    fn serialize_map(self, len: Option<usize>) -> Result<DictBuilder, SerdeError> {
        Ok(DictBuilder::new(len.unwrap_or(0)))
    }

    fn serialize_struct(self, _name: &'static str, len: usize) -> Result<DictBuilder, SerdeError> {
        Ok(DictBuilder::new(len))
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<VariantBuilder<DictBuilder>, SerdeError> {
        Ok(VariantBuilder {
            variant,
            inner: DictBuilder::new(len),
        })
    }
}

/// The items of a list (a sequence) or a tuple (a tuple or tuple struct).
pub(crate) struct SeqBuilder {
    items: Vec<Value>,
    tuple: bool,
}

impl SeqBuilder {
    fn new(len: usize, tuple: bool) -> Self {
        SeqBuilder {
            // A hint from the type's own code: capped, not trusted.
            items: Vec::with_capacity(len.min(4096)),
            tuple,
        }
    }

    fn push<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), SerdeError> {
        let index = self.items.len();
        let item = value
            .serialize(ValueSerializer)
            .map_err(|e| e.at(PathSegment::Index(index)))?;
        self.items.push(item);
        Ok(())
    }

    fn finish(self) -> Value {
        if self.tuple {
            Value::Tuple(self.items.into())
        } else {
            Value::List(self.items.into())
        }
    }
}

impl ser::SerializeSeq for SeqBuilder {
    type Ok = Value;
    type Error = SerdeError;

    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), SerdeError> {
        self.push(value)
    }

    fn end(self) -> Result<Value, SerdeError> {
        Ok(self.finish())
    }
}

impl ser::SerializeTuple for SeqBuilder {
    type Ok = Value;
    type Error = SerdeError;

    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), SerdeError> {
        self.push(value)
    }

    fn end(self) -> Result<Value, SerdeError> {
        Ok(self.finish())
    }
}

impl ser::SerializeTupleStruct for SeqBuilder {
    type Ok = Value;
    type Error = SerdeError;

    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), SerdeError> {
        self.push(value)
    }

    fn end(self) -> Result<Value, SerdeError> {
        Ok(self.finish())
    }
}

/// The items of a dict, in the order serialized.
pub(crate) struct DictBuilder {
    pairs: Vec<(Value, Value)>,
    key: Option<Value>,
}

impl DictBuilder {
    fn new(len: usize) -> Self {
        DictBuilder {
            pairs: Vec::with_capacity(len.min(4096)),
            key: None,
        }
    }

    fn insert<T: ?Sized + Serialize>(&mut self, key: Value, value: &T) -> Result<(), SerdeError> {
        let value = value
            .serialize(ValueSerializer)
            .map_err(|e| e.at(PathSegment::Key(KeyText::of(&key))))?;
        self.pairs.push((key, value));
        Ok(())
    }

    fn finish(self) -> Value {
        Value::Dict(self.pairs.into())
    }
}

impl ser::SerializeMap for DictBuilder {
    type Ok = Value;
    type Error = SerdeError;

    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), SerdeError> {
        let key = key.serialize(ValueSerializer)?;
        if let Some(found) = unhashable(&key) {
            return Err(SerdeError::new(SerdeErrorKind::UnhashableKey { found }));
        }
        self.key = Some(key);
        Ok(())
    }

    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), SerdeError> {
        let key = self.key.take().ok_or_else(|| {
            SerdeError::custom("a map serialized a value before its key (serialize_value)")
        })?;
        self.insert(key, value)
    }

    fn end(self) -> Result<Value, SerdeError> {
        Ok(self.finish())
    }
}

impl ser::SerializeStruct for DictBuilder {
    type Ok = Value;
    type Error = SerdeError;

    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), SerdeError> {
        self.insert(str_value(key), value)
    }

    fn end(self) -> Result<Value, SerdeError> {
        Ok(self.finish())
    }
}

/// An enum variant with content: `{variant: content}`.
pub(crate) struct VariantBuilder<B> {
    variant: &'static str,
    inner: B,
}

impl<B> VariantBuilder<B> {
    fn wrap(variant: &'static str, content: Value) -> Value {
        Value::Dict(Arc::new([(str_value(variant), content)]))
    }
}

impl ser::SerializeTupleVariant for VariantBuilder<SeqBuilder> {
    type Ok = Value;
    type Error = SerdeError;

    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), SerdeError> {
        let variant = self.variant;
        self.inner
            .push(value)
            .map_err(|e| e.at(PathSegment::Variant(variant)))
    }

    fn end(self) -> Result<Value, SerdeError> {
        Ok(Self::wrap(self.variant, self.inner.finish()))
    }
}

impl ser::SerializeStructVariant for VariantBuilder<DictBuilder> {
    type Ok = Value;
    type Error = SerdeError;

    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), SerdeError> {
        let variant = self.variant;
        self.inner
            .insert(str_value(key), value)
            .map_err(|e| e.at(PathSegment::Variant(variant)))
    }

    fn end(self) -> Result<Value, SerdeError> {
        Ok(Self::wrap(self.variant, self.inner.finish()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le(value: &Value) -> Vec<u8> {
        match value {
            Value::BigInt(bytes) => bytes.to_vec(),
            other => panic!("not a big int: {other:?}"),
        }
    }

    #[test]
    fn big_ints_take_the_fewest_bytes_pickle_would() {
        assert!(matches!(int(i128::from(i64::MAX)), Value::Int(i64::MAX)));
        // 2**63: eight bytes and a zero on top.
        assert_eq!(le(&int(1 << 63)), [0, 0, 0, 0, 0, 0, 0, 0x80, 0]);
        // -(2**63) - 1
        assert_eq!(
            le(&int(-(1 << 63) - 1)),
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff]
        );
        assert_eq!(
            le(&unsigned(u128::from(u64::MAX))),
            [0xff; 8].iter().copied().chain([0]).collect::<Vec<_>>()
        );
        let mut max = vec![0xff; 16];
        max.push(0);
        assert_eq!(le(&unsigned(u128::MAX)), max);
        assert_eq!(le(&int(i128::MIN)).len(), 16);
    }
}
