//! The rebuilt object graph: what `pickle.loads` would give a torch process,
//! as Rust values.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use rustc_hash::FxHashSet;
use tensorshare_compat::pickle::{Global, SharedBytes};

use super::{CallKind, Callable, Storage, Tensor};
use crate::DType;

mod access;
mod attributes;
mod convert;
mod dict;
mod display;
mod error;

pub use attributes::Attributes;
pub use dict::Dict;
pub use error::{PathSegment, ValueAccessError};

/// A rebuilt Python object.
///
/// Python objects are shared by reference, and a pickle's memo keeps them
/// shared: one list can sit in a thousand places, nested a hundred deep, in
/// a few hundred bytes. Containers and strings are therefore reference
/// counted, so cloning a `Value` is cheap and a shared object stays one
/// object: a graph's memory follows the pickle's size, never the size of
/// its expansion. Walk one with [`Value::shared_identity`] in hand (as
/// [`Value::tensors`] and `inspect` do) to visit each shared object once.
///
/// Build one with `From`: Rust's scalars and strings, `()` and `Option`
/// for `None`, `Vec`s, slices and arrays for lists, tuples for tuples, maps
/// and a [`Dict`] for dicts, tensors. Read one with the `as_*` accessors and
/// [`get`](Value::get), which give an `Option`, or with `TryFrom` and
/// [`try_get`](Value::try_get), whose [`ValueAccessError`] says what was
/// found instead and where.
///
/// # Examples
///
/// ```
/// use tensorshare::{Dict, Value};
///
/// let message = Value::from((Dict::new().with("ids", vec![3, 1, 4]), "train", None::<f64>));
/// let (fields, split, weight): (&Value, &str, &Value) = (&message).try_into()?;
/// assert_eq!(fields.try_get::<Vec<u32>>("ids")?, [3, 1, 4]);
/// assert_eq!((split, weight.is_none()), ("train", true));
/// assert_eq!(
///     fields.try_get::<Vec<String>>("ids").unwrap_err().to_string(),
///     "expected a str at ['ids'][0], found an int",
/// );
/// # Ok::<(), tensorshare::model::ValueAccessError>(())
/// ```
#[derive(Clone, Debug)]
pub enum Value {
    /// `None`.
    None,
    /// A `bool`.
    Bool(bool),
    /// An `int` that fits in 64 bits.
    Int(i64),
    /// A larger `int`, little-endian two's complement.
    BigInt(Arc<[u8]>),
    /// A `float`.
    Float(f64),
    /// A `str`.
    Str(Arc<str>),
    /// A `bytes`: a large one received shares the message's buffer.
    Bytes(SharedBytes),
    /// A `bytearray`: a large one received shares the message's buffer.
    /// Its bytes are not written through: a copy of the value is a copy of
    /// the `bytearray`.
    ByteArray(SharedBytes),
    /// A `tuple`.
    Tuple(Arc<[Value]>),
    /// A `list`.
    List(Arc<[Value]>),
    /// A `dict`, in insertion order.
    Dict(Arc<[(Value, Value)]>),
    /// A `collections.OrderedDict`: its items, and the attributes set on it
    /// (a `state_dict()`'s `_metadata`). It is one object with whatever
    /// shares its items.
    OrderedDict(Arc<[(Value, Value)]>, Attributes),
    /// A `set`.
    Set(Arc<[Value]>),
    /// A `frozenset`.
    FrozenSet(Arc<[Value]>),
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
    Size(Arc<[i64]>),
    /// An allowlisted class or function referenced by name and not called
    /// (e.g. the `cls` argument of torch's rebuilders).
    Global(Global),
    /// Something the registry can call (a rebuilder, or a bound method such
    /// as `UntypedStorage.from_file`).
    Callable(Callable),
    /// A value made by a user rebuilder.
    Custom(Custom),
    /// A global outside the allowlist, or a call the pickle asks of one,
    /// kept inert for display. Only a registry whose
    /// [`LoadOptions::unknown_globals`](crate::registry::LoadOptions::unknown_globals)
    /// is [`UnknownGlobals::Opaque`](crate::registry::UnknownGlobals::Opaque)
    /// makes them; nothing is ever called.
    Opaque(Arc<Opaque>),
}

/// What a pickle names or asks to call outside the allowlist, recorded and
/// never executed.
#[derive(Clone, Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "only ever held behind the Arc of Value::Opaque"
)]
pub enum Opaque {
    /// A global the registry does not allow, such as `os.system`.
    Global(Global),
    /// A call: `callee(*args, **kwargs)`, then `BUILD` state and appended
    /// items, as the pickle asks for it.
    Call(OpaqueCall),
}

/// A call recorded instead of made: its callee is outside the allowlist,
/// or the registered rebuilder refused what it was given (`refused` says
/// why).
#[derive(Clone, Debug)]
pub struct OpaqueCall {
    /// What would be called: usually an [`Opaque::Global`].
    pub callee: Value,
    /// Which opcode asks for the call.
    pub kind: CallKind,
    /// Positional arguments.
    pub args: Vec<Value>,
    /// Keyword arguments (`NEWOBJ_EX`).
    pub kwargs: Vec<(Value, Value)>,
    /// The argument of `BUILD` (`__setstate__`), if any.
    pub state: Option<Value>,
    /// Items `APPENDS` adds to the result.
    pub list_items: Vec<Value>,
    /// Items `SETITEMS` sets on the result.
    pub dict_items: Vec<(Value, Value)>,
    /// Why the allowlisted rebuilder of `callee` refused the call, when it
    /// is allowlisted.
    pub refused: Option<String>,
}

impl OpaqueCall {
    /// The name of what would be called, when it is a global.
    pub fn callee_name(&self) -> Option<&Global> {
        match &self.callee {
            Value::Global(global) => Some(global),
            Value::Callable(callable) => Some(callable.name()),
            Value::Opaque(opaque) => match &**opaque {
                Opaque::Global(global) => Some(global),
                Opaque::Call(_) => None,
            },
            _ => None,
        }
    }
}

/// A value of a user-defined type, produced by a user rebuilder.
#[derive(Clone)]
pub struct Custom {
    /// The global the value was rebuilt from, for display.
    pub global: Global,
    /// The value.
    pub(crate) value: Arc<dyn Any + Send + Sync>,
}

impl Custom {
    /// A value of a Rust type, standing for the Python object `global`
    /// names: it pickles through the reducer registered for its type
    /// ([`Registry::register_reducer`](crate::Registry::register_reducer)).
    pub fn new<T: Any + Send + Sync>(global: Global, value: T) -> Self {
        Self {
            global,
            value: Arc::new(value),
        }
    }

    /// The value, if it is a `T`.
    pub fn downcast_ref<T: Any>(&self) -> Option<&T> {
        self.value.downcast_ref::<T>()
    }
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
            Value::OrderedDict(..) => "OrderedDict",
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
            Value::Opaque(opaque) => match **opaque {
                Opaque::Global(_) => "unknown global",
                Opaque::Call(_) => "unknown call",
            },
        }
    }

    /// What identifies this value as one shared object: the address of its
    /// allocation for containers, strings, sizes, big ints, byte arrays and
    /// opaque nodes that more than one holder has, and for every tensor;
    /// `None` for values held inline or held only here. Two values with the
    /// same identity are one Python object referenced twice.
    ///
    /// An allocation with a single holder cannot occur twice in a graph, so
    /// the walks that remember what they have seen ([`distinct`](Self::distinct),
    /// sending, `inspect`) skip it at the cost of reading its count.
    pub fn shared_identity(&self) -> Option<usize> {
        fn address<T: ?Sized>(arc: &Arc<T>) -> Option<usize> {
            (Arc::strong_count(arc) > 1).then(|| Arc::as_ptr(arc).cast::<()>() as usize)
        }
        match self {
            Value::Tuple(items)
            | Value::List(items)
            | Value::Set(items)
            | Value::FrozenSet(items) => address(items),
            Value::Dict(pairs) | Value::OrderedDict(pairs, _) => address(pairs),
            Value::Str(s) => address(s),
            Value::BigInt(bytes) => address(bytes),
            Value::Size(dims) => address(dims),
            Value::Tensor(t) => Some(t.identity()),
            Value::Opaque(opaque) => address(opaque),
            _ => None,
        }
    }

    /// The values directly inside this one, in order: items, then for dicts
    /// key before value (an `OrderedDict`'s attribute values after its
    /// items), then the parts of an opaque call.
    pub fn children(&self) -> impl Iterator<Item = &Value> {
        Children {
            value: self,
            index: 0,
        }
    }

    /// Every distinct tensor in the graph, depth first in order of first
    /// appearance: list and tuple items in order, dict items key then value.
    pub fn tensors(&self) -> Vec<&Tensor> {
        self.distinct().filter_map(Value::as_tensor).collect()
    }

    /// Every value of the graph, this one first, depth first in order of
    /// first appearance; a value held in several places (one
    /// [`shared_identity`](Self::shared_identity)) comes once, and what is
    /// inside it once. The walk is linear in the graph's size however much
    /// of it is shared.
    pub fn distinct(&self) -> impl Iterator<Item = &Value> {
        Distinct {
            stack: vec![self],
            seen: FxHashSet::default(),
        }
    }
}

/// The values of a graph, each once; see [`Value::distinct`].
struct Distinct<'a> {
    stack: Vec<&'a Value>,
    seen: FxHashSet<usize>,
}

impl<'a> Iterator for Distinct<'a> {
    type Item = &'a Value;

    fn next(&mut self) -> Option<&'a Value> {
        loop {
            let value = self.stack.pop()?;
            if let Some(identity) = value.shared_identity()
                && !self.seen.insert(identity)
            {
                continue;
            }
            let start = self.stack.len();
            self.stack.extend(value.children());
            self.stack[start..].reverse();
            return Some(value);
        }
    }
}

/// The values directly inside a [`Value`]; see [`Value::children`].
struct Children<'a> {
    value: &'a Value,
    index: usize,
}

impl<'a> Iterator for Children<'a> {
    type Item = &'a Value;

    fn next(&mut self) -> Option<&'a Value> {
        let index = self.index;
        self.index += 1;
        match self.value {
            Value::Tuple(items)
            | Value::List(items)
            | Value::Set(items)
            | Value::FrozenSet(items) => items.get(index),
            Value::Dict(pairs) => pair(pairs, index),
            Value::OrderedDict(pairs, attributes) => pair(pairs, index).or_else(|| {
                let index = index.checked_sub(2 * pairs.len())?;
                attributes.iter().nth(index).map(|(_, value)| value)
            }),
            Value::Opaque(opaque) => match &**opaque {
                Opaque::Global(_) => None,
                Opaque::Call(call) => call_part(call, index),
            },
            _ => None,
        }
    }
}

/// The `index`th of the keys and values of `pairs`, key first.
fn pair(pairs: &[(Value, Value)], index: usize) -> Option<&Value> {
    pairs
        .get(index / 2)
        .map(|(k, v)| if index.is_multiple_of(2) { k } else { v })
}

/// The `index`th value inside an opaque call: callee, arguments, keyword
/// pairs, state, then items.
fn call_part(call: &OpaqueCall, index: usize) -> Option<&Value> {
    let mut index = index;
    if index == 0 {
        return Some(&call.callee);
    }
    index -= 1;
    if let Some(arg) = call.args.get(index) {
        return Some(arg);
    }
    index -= call.args.len();
    if index < 2 * call.kwargs.len() {
        return pair(&call.kwargs, index);
    }
    index -= 2 * call.kwargs.len();
    if let Some(state) = &call.state {
        if index == 0 {
            return Some(state);
        }
        index -= 1;
    }
    if let Some(item) = call.list_items.get(index) {
        return Some(item);
    }
    index -= call.list_items.len();
    pair(&call.dict_items, index)
}
