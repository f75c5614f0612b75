//! Building values: `From` the Rust scalars, strings, tensors and
//! containers a message holds.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tensorshare_compat::pickle::SharedBytes;

use super::Value;
use crate::DType;
use crate::model::{Storage, Tensor};

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

macro_rules! from_small_int {
    ($($ty:ty),*) => {
        $(
            /// A Python `int`.
            impl From<$ty> for Value {
                fn from(i: $ty) -> Self {
                    Value::Int(i64::from(i))
                }
            }
        )*
    };
}

from_small_int!(i8, i16, i32, i64, u8, u16, u32);

macro_rules! from_wide_int {
    ($($ty:ty),*) => {
        $(
            /// A Python `int`: an [`Int`](Value::Int) when it fits in 64 bits,
            /// a [`BigInt`](Value::BigInt) otherwise.
            impl From<$ty> for Value {
                fn from(i: $ty) -> Self {
                    match i64::try_from(i) {
                        Ok(i) => Value::Int(i),
                        Err(_) => big_int(i128::try_from(i).unwrap_or(i128::MAX)),
                    }
                }
            }
        )*
    };
}

from_wide_int!(isize, u64, usize);

/// An int as [`Value::BigInt`]: little-endian two's complement, with the
/// sign bytes Python would not write dropped.
fn big_int(i: i128) -> Value {
    let bytes = i.to_le_bytes();
    let fill = if i < 0 { 0xff } else { 0 };
    let mut len = bytes.len();
    // Drop a sign byte while the byte below it keeps the sign.
    while len > 1 && bytes[len - 1] == fill && (bytes[len - 2] & 0x80 == fill & 0x80) {
        len -= 1;
    }
    Value::BigInt(bytes[..len].into())
}

/// A Python `float`.
impl From<f64> for Value {
    fn from(x: f64) -> Self {
        Value::Float(x)
    }
}

/// A Python `float`, widened exactly.
impl From<f32> for Value {
    fn from(x: f32) -> Self {
        Value::Float(f64::from(x))
    }
}

/// A Python `str`.
impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.into())
    }
}

/// A Python `str`.
impl From<&String> for Value {
    fn from(s: &String) -> Self {
        Value::Str(s.as_str().into())
    }
}

/// A Python `str`.
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s.into())
    }
}

/// A Python `str`.
impl From<Arc<str>> for Value {
    fn from(s: Arc<str>) -> Self {
        Value::Str(s)
    }
}

/// A Python `bytes`.
impl From<SharedBytes> for Value {
    fn from(bytes: SharedBytes) -> Self {
        Value::Bytes(bytes)
    }
}

/// `None`.
impl From<()> for Value {
    fn from((): ()) -> Self {
        Value::None
    }
}

/// `None`, or the value.
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(value: Option<T>) -> Self {
        value.map_or(Value::None, Into::into)
    }
}

/// A `torch.Tensor` (a `torch.nn.Parameter` when it is one).
impl From<Tensor> for Value {
    fn from(t: Tensor) -> Self {
        Value::Tensor(t)
    }
}

/// The same tensor: a handle, not a copy.
impl From<&Tensor> for Value {
    fn from(t: &Tensor) -> Self {
        Value::Tensor(t.clone())
    }
}

/// A `torch.UntypedStorage`.
impl From<Storage> for Value {
    fn from(storage: Storage) -> Self {
        Value::Storage(storage)
    }
}

/// A `torch.dtype`.
impl From<DType> for Value {
    fn from(dtype: DType) -> Self {
        Value::DType(dtype)
    }
}

/// A Python `list`.
impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(items: Vec<T>) -> Self {
        Value::List(items.into_iter().map(Into::into).collect())
    }
}

/// A Python `list`.
impl<T: Into<Value> + Clone> From<&[T]> for Value {
    fn from(items: &[T]) -> Self {
        Value::List(items.iter().cloned().map(Into::into).collect())
    }
}

/// A Python `list`.
impl<T: Into<Value>, const N: usize> From<[T; N]> for Value {
    fn from(items: [T; N]) -> Self {
        Value::List(items.into_iter().map(Into::into).collect())
    }
}

/// A Python `list` of the items.
impl<T: Into<Value>> FromIterator<T> for Value {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        Value::List(items.into_iter().map(Into::into).collect())
    }
}

/// A Python `dict`, in the map's (sorted) order.
impl<K: Into<Value>, V: Into<Value>> From<BTreeMap<K, V>> for Value {
    fn from(map: BTreeMap<K, V>) -> Self {
        Value::Dict(map.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }
}

/// A Python `dict`, in the map's iteration order.
impl<K: Into<Value>, V: Into<Value>, S> From<HashMap<K, V, S>> for Value {
    fn from(map: HashMap<K, V, S>) -> Self {
        Value::Dict(map.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }
}

/// A Python `tuple`.
macro_rules! from_tuple {
    ($($name:ident $index:tt),+) => {
        /// A Python `tuple`.
        impl<$($name: Into<Value>),+> From<($($name,)+)> for Value {
            fn from(items: ($($name,)+)) -> Self {
                Value::Tuple(Arc::new([$(items.$index.into()),+]))
            }
        }
    };
}

from_tuple!(A 0);
from_tuple!(A 0, B 1);
from_tuple!(A 0, B 1, C 2);
from_tuple!(A 0, B 1, C 2, D 3);
from_tuple!(A 0, B 1, C 2, D 3, E 4);
from_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
from_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
from_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
from_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
from_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
from_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
from_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);

#[cfg(test)]
mod tests {
    use super::*;

    fn big(value: Value) -> Vec<u8> {
        match value {
            Value::BigInt(bytes) => bytes.to_vec(),
            other => panic!("not a big int: {other:?}"),
        }
    }

    #[test]
    fn wide_ints_are_ints_when_they_fit_and_minimal_big_ints_otherwise() {
        assert!(matches!(Value::from(u64::MAX >> 1), Value::Int(i64::MAX)));
        assert!(matches!(Value::from(usize::MAX >> 1), Value::Int(i64::MAX)));
        assert!(matches!(Value::from(-3isize), Value::Int(-3)));
        // 2^63 needs a ninth byte for its sign, as pickle's LONG1 writes it.
        assert_eq!(big(Value::from(1u64 << 63)), [0, 0, 0, 0, 0, 0, 0, 0x80, 0]);
        assert_eq!(
            big(Value::from(u64::MAX)),
            [0xff; 8].iter().copied().chain([0]).collect::<Vec<_>>()
        );
        assert_eq!(
            big(big_int(-(1 << 63) - 1)),
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff]
        );
    }
}
