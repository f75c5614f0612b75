//! Reading values: accessors that give an `Option`, and `TryFrom`
//! conversions that say what was found instead.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use super::error::str_repr;
use super::{PathSegment, Value, ValueAccessError};
use crate::DType;
use crate::model::{Storage, Tensor};

/// Accessors: each gives the part of the value asked for, or `None` when
/// the value is something else. [`try_get`](Value::try_get) and `TryFrom`
/// say what was found instead.
///
/// # Examples
///
/// ```
/// use tensorshare::{Dict, StrategyKind, Tensor, Value};
///
/// let image = Tensor::from_slice(&StrategyKind::Bytes, &[0u8; 4], &[2, 2])?;
/// let sample = Value::from(
///     Dict::new()
///         .with("image", image)
///         .with("path", "cat.png")
///         .with("boxes", vec![(0, 0, 2, 2)])
///         .with("score", 0.5)
///         .with("crop", None::<i64>),
/// );
/// for (key, value) in sample.as_dict().expect("a dict") {
///     println!("{}: {}", key.as_str().unwrap_or("?"), value.type_name());
/// }
/// assert_eq!(sample.get("image").and_then(Value::as_tensor).map(Tensor::sizes), Some(&[2, 2][..]));
/// assert_eq!(sample.get("path").and_then(Value::as_str), Some("cat.png"));
/// assert_eq!(sample.get("boxes").and_then(Value::as_list).map(<[Value]>::len), Some(1));
/// assert_eq!(sample.get("score").and_then(Value::as_float), Some(0.5));
/// assert!(sample.get("crop").is_some_and(Value::is_none));
/// assert_eq!(sample.get("path").and_then(Value::as_int), None, "a str is not an int");
/// # Ok::<(), tensorshare::Error>(())
/// ```
impl Value {
    /// Whether this is `None`.
    pub fn is_none(&self) -> bool {
        matches!(self, Value::None)
    }

    /// The bool, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The int, if this is one that fits in 64 bits (`bool` counts, as in Python).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }

    /// The float, if this is one. An int is not: read it with
    /// [`as_int`](Self::as_int).
    pub fn as_float(&self) -> Option<f64> {
        match self {
            Value::Float(x) => Some(*x),
            _ => None,
        }
    }

    /// The text, if this is a `str`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The bytes, if this is a `bytes` or a `bytearray`.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(bytes) => Some(bytes),
            Value::ByteArray(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// The tensor, if this is one.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// The storage this value holds or views: a tensor's, or the storage
    /// itself.
    pub fn storage(&self) -> Option<&Storage> {
        match self {
            Value::Tensor(t) => Some(t.storage()),
            Value::Storage(s) | Value::TypedStorage(s, _) => Some(s),
            _ => None,
        }
    }

    /// The dtype, if this is a `torch.dtype`.
    pub fn as_dtype(&self) -> Option<DType> {
        match self {
            Value::DType(dtype) => Some(*dtype),
            _ => None,
        }
    }

    /// The sizes, if this is a `torch.Size`.
    pub fn as_size(&self) -> Option<&[i64]> {
        match self {
            Value::Size(sizes) => Some(sizes),
            _ => None,
        }
    }

    /// The items, if this is a tuple or list.
    pub fn as_sequence(&self) -> Option<&[Value]> {
        match self {
            Value::Tuple(items) | Value::List(items) => Some(items),
            _ => None,
        }
    }

    /// The items, if this is a tuple.
    pub fn as_tuple(&self) -> Option<&[Value]> {
        match self {
            Value::Tuple(items) => Some(items),
            _ => None,
        }
    }

    /// The items, if this is a list.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(items) => Some(items),
            _ => None,
        }
    }

    /// The key-value pairs in insertion order, if this is a `dict` or a
    /// `collections.OrderedDict`.
    pub fn as_dict(&self) -> Option<&[(Value, Value)]> {
        match self {
            Value::Dict(pairs) | Value::OrderedDict(pairs, _) => Some(pairs),
            _ => None,
        }
    }

    /// The value under the str `key`, if this is a `dict` or an
    /// `OrderedDict` that has it. A pickle may set one key twice; Python
    /// keeps the last value, and so does this.
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare::{Dict, Value};
    ///
    /// let message = Value::from(Dict::new().with("label", 3).with("name", "cat"));
    /// assert_eq!(message.get("label").and_then(Value::as_int), Some(3));
    /// assert!(message.get("image").is_none());
    /// ```
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_dict()?
            .iter()
            .rev()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
    }

    /// The entries of a `dict` or an `OrderedDict` whose keys are all
    /// strs, in order: a state dict's names and values.
    ///
    /// # Errors
    ///
    /// [`ValueAccessError::WrongType`] when this is not a dict, or a key is
    /// not a str.
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare::{Dict, Value};
    ///
    /// let state = Value::from(Dict::new().with("step", 3).with("lr", 0.5));
    /// for (name, value) in state.str_items()? {
    ///     println!("{name}: {value}");
    /// }
    /// assert_eq!(state.str_items()?[1].0, "lr");
    /// # Ok::<(), tensorshare::model::ValueAccessError>(())
    /// ```
    pub fn str_items(&self) -> Result<Vec<(&str, &Value)>, ValueAccessError> {
        let pairs = self
            .as_dict()
            .ok_or_else(|| ValueAccessError::wrong_type("dict", self))?;
        pairs
            .iter()
            .map(|(key, value)| match key.as_str() {
                Some(name) => Ok((name, value)),
                None => Err(ValueAccessError::wrong_type("str key", key)),
            })
            .collect()
    }

    /// The value under the str `key` as a `T`: [`get`](Self::get) with a
    /// [`ValueAccessError`] that says what is wrong and where.
    ///
    /// `T` is anything a `&Value` converts to: `&Tensor` or `Tensor`,
    /// `&str` or `String`, the integer and float types, `bool`, `Vec<T>`,
    /// tuples, maps, or `&Value` itself.
    ///
    /// # Errors
    ///
    /// [`ValueAccessError::WrongType`] when this is not a dict or the value
    /// is not a `T`, [`ValueAccessError::MissingKey`] when the dict has no
    /// such key, and whatever converting the value to `T` says, with its
    /// path under `key`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare::{Dict, Tensor, Value};
    ///
    /// let message = Value::from(Dict::new().with("label", 3).with("boxes", vec![(1, 2), (3, 4)]));
    /// let label: u8 = message.try_get("label")?;
    /// let boxes: Vec<(i64, i64)> = message.try_get("boxes")?;
    /// assert_eq!((label, boxes), (3, vec![(1, 2), (3, 4)]));
    /// assert_eq!(
    ///     message.try_get::<&Tensor>("image").unwrap_err().to_string(),
    ///     "no key 'image' in the dict",
    /// );
    /// # Ok::<(), tensorshare::model::ValueAccessError>(())
    /// ```
    pub fn try_get<'a, T>(&'a self, key: &str) -> Result<T, ValueAccessError>
    where
        T: TryFrom<&'a Value>,
        ValueAccessError: From<T::Error>,
    {
        if self.as_dict().is_none() {
            return Err(ValueAccessError::wrong_type("dict", self));
        }
        let value = self.get(key).ok_or_else(|| ValueAccessError::MissingKey {
            key: str_repr(key),
            container: self.type_name(),
            path: Vec::new(),
        })?;
        T::try_from(value)
            .map_err(|error| ValueAccessError::from(error).within(PathSegment::Key(str_repr(key))))
    }
}

/// Conversions that read one variant, by reference and by value.
macro_rules! read_variant {
    ($($ty:ty, $expected:literal, |$value:ident| $read:expr, |$owned:ident| $take:expr;)*) => {
        $(
            impl<'a> TryFrom<&'a Value> for $ty {
                type Error = ValueAccessError;

                fn try_from($value: &'a Value) -> Result<Self, ValueAccessError> {
                    $read.ok_or_else(|| ValueAccessError::wrong_type($expected, $value))
                }
            }

            impl TryFrom<Value> for $ty {
                type Error = ValueAccessError;

                fn try_from($owned: Value) -> Result<Self, ValueAccessError> {
                    $take
                }
            }
        )*
    };
}

read_variant! {
    bool, "bool", |value| value.as_bool(), |value| Self::try_from(&value);
    f64, "float", |value| value.as_float(), |value| Self::try_from(&value);
    DType, "dtype", |value| value.as_dtype(), |value| Self::try_from(&value);
    String, "str", |value| value.as_str().map(String::from), |value| Self::try_from(&value);
    Arc<str>, "str", |value| match value {
        Value::Str(s) => Some(s.clone()),
        _ => None,
    }, |value| match value {
        Value::Str(s) => Ok(s),
        other => Err(ValueAccessError::wrong_type("str", &other)),
    };
    Tensor, "Tensor", |value| value.as_tensor().cloned(), |value| match value {
        Value::Tensor(t) => Ok(t),
        other => Err(ValueAccessError::wrong_type("Tensor", &other)),
    };
    Storage, "UntypedStorage", |value| match value {
        Value::Storage(s) | Value::TypedStorage(s, _) => Some(s.clone()),
        _ => None,
    }, |value| match value {
        Value::Storage(s) | Value::TypedStorage(s, _) => Ok(s),
        other => Err(ValueAccessError::wrong_type("UntypedStorage", &other)),
    };
}

/// A Python float as an `f32`, rounded to the nearest.
impl<'a> TryFrom<&'a Value> for f32 {
    type Error = ValueAccessError;

    fn try_from(value: &'a Value) -> Result<Self, ValueAccessError> {
        f64::try_from(value).map(|x| x as f32)
    }
}

impl TryFrom<Value> for f32 {
    type Error = ValueAccessError;

    fn try_from(value: Value) -> Result<Self, ValueAccessError> {
        Self::try_from(&value)
    }
}

/// Borrowing conversions: the `&str`, `&[u8]` and `&Tensor` inside.
macro_rules! borrow_variant {
    ($($ty:ty, $expected:literal, $read:path;)*) => {
        $(
            impl<'a> TryFrom<&'a Value> for $ty {
                type Error = ValueAccessError;

                fn try_from(value: &'a Value) -> Result<Self, ValueAccessError> {
                    $read(value).ok_or_else(|| ValueAccessError::wrong_type($expected, value))
                }
            }
        )*
    };
}

borrow_variant! {
    &'a str, "str", Value::as_str;
    &'a [u8], "bytes", Value::as_bytes;
    &'a Tensor, "Tensor", Value::as_tensor;
}

/// The int in `value` (a `bool` counts, as in Python), as an `i128` when it
/// fits; otherwise what to print for it.
fn int_of(value: &Value) -> Result<i128, Result<String, ValueAccessError>> {
    match value {
        Value::Int(i) => Ok(i128::from(*i)),
        Value::Bool(b) => Ok(i128::from(*b)),
        Value::BigInt(bytes) if bytes.len() <= 16 => {
            // Little-endian two's complement: sign-extend to 16 bytes.
            let fill = if bytes.last().is_some_and(|&b| b & 0x80 != 0) {
                0xff
            } else {
                0
            };
            let mut wide = [fill; 16];
            wide[..bytes.len()].copy_from_slice(bytes);
            Ok(i128::from_le_bytes(wide))
        }
        Value::BigInt(bytes) => Err(Ok(format!("an int of {} bits", bytes.len() * 8))),
        other => Err(Err(ValueAccessError::wrong_type("int", other))),
    }
}

macro_rules! read_int {
    ($($ty:ty),*) => {
        $(
            impl<'a> TryFrom<&'a Value> for $ty {
                type Error = ValueAccessError;

                fn try_from(value: &'a Value) -> Result<Self, ValueAccessError> {
                    let out_of_range = |value: String| ValueAccessError::OutOfRange {
                        target: stringify!($ty),
                        value,
                        path: Vec::new(),
                    };
                    match int_of(value) {
                        Ok(int) => <$ty>::try_from(int).map_err(|_| out_of_range(int.to_string())),
                        Err(Ok(large)) => Err(out_of_range(large)),
                        Err(Err(error)) => Err(error),
                    }
                }
            }

            impl TryFrom<Value> for $ty {
                type Error = ValueAccessError;

                fn try_from(value: Value) -> Result<Self, ValueAccessError> {
                    Self::try_from(&value)
                }
            }
        )*
    };
}

read_int!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

/// The items of a tuple or list, each converted.
impl<'a, T> TryFrom<&'a Value> for Vec<T>
where
    T: TryFrom<&'a Value>,
    ValueAccessError: From<T::Error>,
{
    type Error = ValueAccessError;

    fn try_from(value: &'a Value) -> Result<Self, ValueAccessError> {
        let items = value
            .as_sequence()
            .ok_or_else(|| ValueAccessError::wrong_type("list", value))?;
        items
            .iter()
            .enumerate()
            .map(|(index, item)| item_as(item, index))
            .collect()
    }
}

/// `item`, the `index`th of a sequence, as a `T`.
fn item_as<'a, T>(item: &'a Value, index: usize) -> Result<T, ValueAccessError>
where
    T: TryFrom<&'a Value>,
    ValueAccessError: From<T::Error>,
{
    T::try_from(item)
        .map_err(|error| ValueAccessError::from(error).within(PathSegment::Index(index)))
}

/// The items of a dict or `OrderedDict`, keys and values each converted;
/// a key set twice keeps its last value, as in Python.
fn dict_items<'a, K, V>(
    value: &'a Value,
) -> Result<impl Iterator<Item = Result<(K, V), ValueAccessError>> + 'a, ValueAccessError>
where
    K: TryFrom<&'a Value> + 'a,
    V: TryFrom<&'a Value> + 'a,
    ValueAccessError: From<K::Error> + From<V::Error>,
{
    let pairs = value
        .as_dict()
        .ok_or_else(|| ValueAccessError::wrong_type("dict", value))?;
    Ok(pairs.iter().map(|(key, item)| {
        let segment = PathSegment::key(key);
        let key = K::try_from(key)
            .map_err(|error| ValueAccessError::from(error).within(segment.clone()))?;
        let item =
            V::try_from(item).map_err(|error| ValueAccessError::from(error).within(segment))?;
        Ok((key, item))
    }))
}

/// A dict's items, each key and value converted.
impl<'a, K, V, S> TryFrom<&'a Value> for HashMap<K, V, S>
where
    K: TryFrom<&'a Value> + Eq + Hash + 'a,
    V: TryFrom<&'a Value> + 'a,
    S: BuildHasher + Default,
    ValueAccessError: From<K::Error> + From<V::Error>,
{
    type Error = ValueAccessError;

    fn try_from(value: &'a Value) -> Result<Self, ValueAccessError> {
        dict_items(value)?.collect()
    }
}

/// A dict's items, each key and value converted.
impl<'a, K, V> TryFrom<&'a Value> for BTreeMap<K, V>
where
    K: TryFrom<&'a Value> + Ord + 'a,
    V: TryFrom<&'a Value> + 'a,
    ValueAccessError: From<K::Error> + From<V::Error>,
{
    type Error = ValueAccessError;

    fn try_from(value: &'a Value) -> Result<Self, ValueAccessError> {
        dict_items(value)?.collect()
    }
}

/// A tuple (or list) of exactly as many items, each converted.
macro_rules! read_tuple {
    ($len:literal: $($name:ident $index:tt),+) => {
        impl<'a, $($name),+> TryFrom<&'a Value> for ($($name,)+)
        where
            $($name: TryFrom<&'a Value>,)+
            $(ValueAccessError: From<$name::Error>,)+
        {
            type Error = ValueAccessError;

            fn try_from(value: &'a Value) -> Result<Self, ValueAccessError> {
                let items = value
                    .as_sequence()
                    .ok_or_else(|| ValueAccessError::wrong_type("tuple", value))?;
                if items.len() != $len {
                    return Err(ValueAccessError::WrongLength {
                        expected: "tuple",
                        expected_len: $len,
                        found_len: items.len(),
                        path: Vec::new(),
                    });
                }
                Ok(($(item_as::<$name>(&items[$index], $index)?,)+))
            }
        }
    };
}

read_tuple!(1: A 0);
read_tuple!(2: A 0, B 1);
read_tuple!(3: A 0, B 1, C 2);
read_tuple!(4: A 0, B 1, C 2, D 3);
read_tuple!(5: A 0, B 1, C 2, D 3, E 4);
read_tuple!(6: A 0, B 1, C 2, D 3, E 4, F 5);
read_tuple!(7: A 0, B 1, C 2, D 3, E 4, F 5, G 6);
read_tuple!(8: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
read_tuple!(9: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
read_tuple!(10: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
read_tuple!(11: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
read_tuple!(12: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);

/// A str value equals the str it holds, so that a key reads as one:
/// `key == "weight"`.
impl PartialEq<str> for Value {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == Some(other)
    }
}

impl PartialEq<&str> for Value {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == Some(*other)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use super::*;
    use crate::model::Dict;

    #[test]
    fn str_items_read_a_state_dict_in_order_and_refuse_other_keys() {
        let state = Value::from(Dict::new().with("b", 1).with("a", 2));
        let items = state.str_items().expect("str keys");
        let names: Vec<&str> = items.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["b", "a"]);
        assert!(items[0].1.as_int() == Some(1) && state.as_dict().expect("a dict")[1].0 == "a");
        let error = Value::from(Dict::new().with("a", 1).with(2, 3))
            .str_items()
            .unwrap_err();
        assert_eq!(error.to_string(), "expected a str key, found an int");
        let error = Value::from(1).str_items().unwrap_err();
        assert_eq!(error.to_string(), "expected a dict, found an int");
        let (a, one) = (Value::from("a"), Value::from(1));
        assert!(a == "a" && a != "b" && one != "1");
    }

    fn message() -> Value {
        let image = Tensor::from_slice(
            &tensorshare_strategies::StrategyKind::Bytes,
            &[1u8, 2],
            &[2],
        )
        .unwrap();
        Value::from(
            Dict::new()
                .with("image", image)
                .with("label", 300)
                .with("name", "cat")
                .with("boxes", vec![(1, 2.5), (3, 4.5)])
                .with("flags", (true, None::<i64>)),
        )
    }

    #[test]
    fn accessors_give_the_variant_or_none() {
        let message = message();
        assert!(message.get("image").and_then(Value::as_tensor).is_some());
        assert_eq!(message.get("label").and_then(Value::as_int), Some(300));
        assert_eq!(message.get("name").and_then(Value::as_str), Some("cat"));
        assert_eq!(
            message.get("label").and_then(Value::as_float),
            None,
            "an int is not a float"
        );
        assert_eq!(
            message
                .get("boxes")
                .and_then(Value::as_list)
                .map(<[Value]>::len),
            Some(2)
        );
        assert!(message.get("boxes").and_then(Value::as_tuple).is_none());
        let flags = message.get("flags").and_then(Value::as_tuple).unwrap();
        assert_eq!(flags[0].as_bool(), Some(true));
        assert!(flags[1].is_none());
        assert_eq!(message.as_dict().map(<[(Value, Value)]>::len), Some(5));
        assert!(message.get("missing").is_none());
        assert!(Value::from(3).get("image").is_none(), "an int has no keys");
        assert_eq!(
            Value::from(crate::DType::Int8).as_dtype(),
            Some(crate::DType::Int8)
        );
        assert_eq!(Value::Size(vec![2, 3].into()).as_size(), Some(&[2, 3][..]));
        assert_eq!(
            Value::from(tensorshare_compat::pickle::SharedBytes::from(&b"ab"[..])).as_bytes(),
            Some(&b"ab"[..])
        );
    }

    #[test]
    fn a_key_set_twice_reads_as_python_keeps_it() {
        let pairs = vec![
            (Value::from("a"), Value::from(1)),
            (Value::from("a"), Value::from(2)),
        ];
        let dict = Value::Dict(pairs.into());
        assert_eq!(dict.try_get::<i64>("a"), Ok(2));
        let map: HashMap<String, i64> = (&dict).try_into().unwrap();
        assert_eq!(map["a"], 2);
    }

    #[test]
    fn conversions_read_typed_values_and_name_what_they_found() {
        let message = message();
        assert_eq!(message.try_get::<&Tensor>("image").unwrap().numel(), 2);
        assert_eq!(message.try_get::<u16>("label"), Ok(300));
        assert_eq!(message.try_get::<String>("name").as_deref(), Ok("cat"));
        assert_eq!(
            message.try_get::<Vec<(u8, f64)>>("boxes"),
            Ok(vec![(1, 2.5), (3, 4.5)])
        );
        assert_eq!(
            message
                .try_get::<(bool, &Value)>("flags")
                .map(|(b, v)| (b, v.is_none())),
            Ok((true, true))
        );

        let error = |result: Result<(), ValueAccessError>| result.unwrap_err().to_string();
        assert_eq!(
            error(message.try_get::<&Tensor>("name").map(drop)),
            "expected a Tensor at ['name'], found a str"
        );
        assert_eq!(
            error(message.try_get::<u8>("label").map(drop)),
            "expected an int that fits in u8 at ['label'], found 300"
        );
        assert_eq!(
            error(message.try_get::<Vec<(u8, String)>>("boxes").map(drop)),
            "expected a str at ['boxes'][0][1], found a float"
        );
        assert_eq!(
            error(message.try_get::<(bool, i64, i64)>("flags").map(drop)),
            "expected a tuple of 3 items at ['flags'], found one of 2"
        );
        assert_eq!(
            error(message.try_get::<i64>("missing").map(drop)),
            "no key 'missing' in the dict"
        );
        assert_eq!(
            error(Value::from(vec![1]).try_get::<i64>("a").map(drop)),
            "expected a dict, found a list"
        );
        let nested = Value::from(Dict::new().with("batch", vec![Dict::new().with("image", 1)]));
        let images: Result<Vec<HashMap<String, Tensor>>, _> = nested.try_get("batch");
        assert_eq!(
            images.unwrap_err().to_string(),
            "expected a Tensor at ['batch'][0]['image'], found an int"
        );
    }

    #[test]
    fn ints_convert_within_range_big_ints_included() {
        assert_eq!(u64::try_from(&Value::from(u64::MAX)), Ok(u64::MAX));
        assert_eq!(i64::try_from(&Value::from(true)), Ok(1), "a bool is an int");
        assert_eq!(i8::try_from(Value::from(-128)), Ok(-128));
        assert!(matches!(
            u32::try_from(&Value::from(-1)),
            Err(ValueAccessError::OutOfRange { target: "u32", ref value, .. }) if value == "-1"
        ));
        let huge = Value::BigInt(
            vec![0u8; 40]
                .into_iter()
                .chain([1])
                .collect::<Vec<_>>()
                .into(),
        );
        assert_eq!(
            u64::try_from(&huge).unwrap_err().to_string(),
            "expected an int that fits in u64, found an int of 328 bits"
        );
        assert_eq!(f32::try_from(&Value::from(0.1)), Ok(0.1f32));
        assert!(
            f64::try_from(&Value::from(1)).is_err(),
            "an int is not a float"
        );
        assert!(
            bool::try_from(&Value::from(1)).is_err(),
            "an int is not a bool"
        );
    }

    #[test]
    fn maps_read_dicts_and_ordered_dicts() {
        let state = Dict::new()
            .with("weight", 1.5)
            .with("bias", -0.5)
            .into_ordered_dict();
        let map: BTreeMap<String, f64> = (&state).try_into().unwrap();
        assert_eq!(
            map,
            BTreeMap::from([("bias".into(), -0.5), ("weight".into(), 1.5)])
        );
        let by_int = Value::from(BTreeMap::from([(1, "a"), (2, "b")]));
        let map: HashMap<i64, &str> = (&by_int).try_into().unwrap();
        assert_eq!(map[&2], "b");
        let wrong: Result<HashMap<i64, i64>, _> = (&by_int).try_into();
        assert_eq!(
            wrong.unwrap_err().to_string(),
            "expected an int at [1], found a str"
        );
        let wrong: Result<HashMap<String, &str>, _> = (&by_int).try_into();
        assert_eq!(
            wrong.unwrap_err().to_string(),
            "expected a str at [1], found an int"
        );
    }

    #[test]
    fn owned_conversions_take_the_value() {
        let message = message();
        let image = message.get("image").unwrap().clone();
        let tensor = Tensor::try_from(image.clone()).unwrap();
        assert!(tensor.same_as(image.as_tensor().unwrap()));
        assert_eq!(String::try_from(Value::from("x")).as_deref(), Ok("x"));
        assert_eq!(Arc::<str>::try_from(Value::from("y")).as_deref(), Ok("y"));
        assert!(Storage::try_from(Value::from(1)).is_err());
        assert_eq!(
            Tensor::try_from(Value::None).unwrap_err().to_string(),
            "expected a Tensor, found None"
        );
    }
}
