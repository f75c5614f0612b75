//! The rebuilt object graph: what `pickle.loads` would give a torch process,
//! as Rust values.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use tensorshare_compat::pickle::{Global, SharedBytes};

use crate::registry::Callable;
use crate::{DType, Storage, Tensor};

/// A rebuilt Python object.
#[derive(Clone, Debug)]
pub enum Value {
    /// `None`.
    None,
    /// A `bool`.
    Bool(bool),
    /// An `int` that fits in 64 bits.
    Int(i64),
    /// A larger `int`, little-endian two's complement.
    BigInt(Vec<u8>),
    /// A `float`.
    Float(f64),
    /// A `str`.
    Str(String),
    /// A `bytes`: a large one received shares the message's buffer.
    Bytes(SharedBytes),
    /// A `bytearray`.
    ByteArray(Vec<u8>),
    /// A `tuple`.
    Tuple(Vec<Value>),
    /// A `list`.
    List(Vec<Value>),
    /// A `dict`, in insertion order.
    Dict(Vec<(Value, Value)>),
    /// A `collections.OrderedDict`.
    OrderedDict(Vec<(Value, Value)>),
    /// A `set`.
    Set(Vec<Value>),
    /// A `frozenset`.
    FrozenSet(Vec<Value>),
    /// A `torch.Tensor` or `torch.nn.Parameter`.
    Tensor(Tensor),
    /// A `torch.UntypedStorage`.
    Storage(Storage),
    /// A `torch.TypedStorage` (or legacy class such as `torch.FloatStorage`):
    /// an untyped storage read as `dtype` elements.
    TypedStorage(Storage, DType),
    /// A `torch.dtype`.
    DType(DType),
    /// A `torch.Size`.
    Size(Vec<i64>),
    /// An allowlisted class or function referenced by name and not called
    /// (e.g. the `cls` argument of torch's rebuilders).
    Global(Global),
    /// Something the registry can call (a rebuilder, or a bound method such
    /// as `UntypedStorage.from_file`).
    Callable(Callable),
    /// A value made by a user rebuilder.
    Custom(Custom),
}

/// A value of a user-defined type, produced by a user rebuilder.
#[derive(Clone)]
pub struct Custom {
    /// The global the value was rebuilt from, for display.
    pub global: Global,
    /// The value.
    pub value: Arc<dyn Any + Send + Sync>,
}

impl fmt::Debug for Custom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Custom({})", self.global)
    }
}

impl Value {
    /// The Python type name, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "NoneType",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::ByteArray(_) => "bytearray",
            Value::Tuple(_) => "tuple",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
            Value::OrderedDict(_) => "OrderedDict",
            Value::Set(_) => "set",
            Value::FrozenSet(_) => "frozenset",
            Value::Tensor(_) => "Tensor",
            Value::Storage(_) => "UntypedStorage",
            Value::TypedStorage(..) => "TypedStorage",
            Value::DType(_) => "dtype",
            Value::Size(_) => "Size",
            Value::Global(_) => "global",
            Value::Callable(_) => "callable",
            Value::Custom(_) => "object",
        }
    }

    /// The tensor, if this is one.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
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

    /// The items, if this is a tuple or list.
    pub fn as_sequence(&self) -> Option<&[Value]> {
        match self {
            Value::Tuple(items) | Value::List(items) => Some(items),
            _ => None,
        }
    }

    /// Every tensor in the graph, depth first, each occurrence (a tensor held
    /// twice appears twice): list and tuple items in order, dict items key
    /// then value; tensors are not descended into.
    pub fn tensors(&self) -> Vec<&Tensor> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(value) = stack.pop() {
            match value {
                Value::Tensor(t) => out.push(t),
                Value::Tuple(items)
                | Value::List(items)
                | Value::Set(items)
                | Value::FrozenSet(items) => stack.extend(items.iter().rev()),
                Value::Dict(items) | Value::OrderedDict(items) => {
                    for (k, v) in items.iter().rev() {
                        stack.push(v);
                        stack.push(k);
                    }
                }
                _ => {}
            }
        }
        out
    }
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Self {
        Value::Tensor(t)
    }
}
