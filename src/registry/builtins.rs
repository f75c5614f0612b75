//! Rebuilders for the builtin globals plain pickles use for containers.

use std::sync::Arc;

use super::{Call, CallKind, RebuildError, Registry};
use crate::Value;
use crate::model::{Attributes, SharedBytes};

pub(super) fn register(registry: &mut Registry) {
    registry.register_rebuilder("collections", "OrderedDict", ordered_dict);
    registry.register_rebuilder("builtins", "set", |call: Call<'_>| {
        Ok(Value::Set(iterable_arg(&call)?))
    });
    registry.register_rebuilder("builtins", "frozenset", |call: Call<'_>| {
        Ok(Value::FrozenSet(iterable_arg(&call)?))
    });
    registry.register_rebuilder("builtins", "bytearray", bytearray);
    registry.register_rebuilder("builtins", "bytes", empty_bytes);
    registry.register_rebuilder("_codecs", "encode", codecs_encode);
}

/// `collections.OrderedDict`: `REDUCE` with `()` (or a list of pairs), then
/// `SETITEMS`, as `OrderedDict.__reduce__` pickles it. A `BUILD` state, a
/// dict of `str` to anything, holds its attributes (a state_dict's
/// `_metadata`), kept beside the items.
fn ordered_dict(call: Call<'_>) -> Result<Value, RebuildError> {
    if call.kind != CallKind::Reduce || !call.list_items.is_empty() {
        return Err(call.invalid("expected OrderedDict(), then items"));
    }
    let attributes = match call.state {
        None | Some(Value::None) => Attributes::default(),
        Some(Value::Dict(pairs)) => pairs
            .iter()
            .map(|(name, value)| match name {
                Value::Str(name) => Ok((name.clone(), value.clone())),
                _ => Err(call.invalid("attribute names must be str")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(call.invalid("state must be a dict of attributes")),
    };
    let mut items = match call.args {
        [] => Vec::new(),
        [Value::List(pairs)] | [Value::Tuple(pairs)] => pairs
            .iter()
            .map(|pair| match pair.as_sequence() {
                Some([k, v]) => Ok((k.clone(), v.clone())),
                _ => Err(call.wrong_arguments("a sequence of (key, value) pairs")),
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(call.wrong_arguments("() or a list of (key, value) pairs")),
    };
    items.extend(call.dict_items.iter().cloned());
    Ok(Value::OrderedDict(items.into(), attributes))
}

/// The items of `set(iterable)`: shared with the list they came from, as
/// nothing mutates either.
fn iterable_arg(call: &Call<'_>) -> Result<Arc<[Value]>, RebuildError> {
    match call.reduce_args()? {
        [] => Ok(Arc::new([])),
        [Value::List(items)] | [Value::Tuple(items)] | [Value::Set(items)] => Ok(items.clone()),
        _ => Err(call.wrong_arguments("one list of items")),
    }
}

/// `bytearray(b)` or `bytearray(str, 'latin-1')`: how protocols 2-4 pickle a bytearray.
fn bytearray(call: Call<'_>) -> Result<Value, RebuildError> {
    match call.reduce_args()? {
        [] => Ok(Value::ByteArray(SharedBytes::default())),
        [Value::Bytes(b)] => Ok(Value::ByteArray(b.clone())),
        [Value::Str(s), Value::Str(encoding)] if is_latin1(encoding) => {
            Ok(Value::ByteArray(latin1_bytes(&call, s)?.into()))
        }
        _ => Err(call.wrong_arguments("(bytes,) or (str, 'latin-1')")),
    }
}

/// `bytes()`: how protocols 0-2 pickle an empty `bytes` (`save_bytes`
/// writes any other through `_codecs.encode`). Only that call is allowed:
/// `bytes(n)` would allocate `n` zero bytes from one small int.
fn empty_bytes(call: Call<'_>) -> Result<Value, RebuildError> {
    match call.reduce_args()? {
        [] => Ok(Value::Bytes(Vec::new().into())),
        _ => Err(call.wrong_arguments("() (CPython pickles only empty bytes as bytes())")),
    }
}

/// `_codecs.encode(str, 'latin1')`: how protocols 0-2 pickle non-empty `bytes`.
fn codecs_encode(call: Call<'_>) -> Result<Value, RebuildError> {
    match call.reduce_args()? {
        [Value::Str(s), Value::Str(encoding)] if is_latin1(encoding) => {
            Ok(Value::Bytes(latin1_bytes(&call, s)?.into()))
        }
        _ => Err(call.wrong_arguments("(str, 'latin1')")),
    }
}

fn is_latin1(encoding: &str) -> bool {
    matches!(
        encoding,
        "latin1" | "latin-1" | "latin_1" | "iso-8859-1" | "iso8859-1"
    )
}

fn latin1_bytes(call: &Call<'_>, s: &str) -> Result<Vec<u8>, RebuildError> {
    s.chars()
        .map(|c| u8::try_from(u32::from(c)).map_err(|_| call.invalid("character outside latin-1")))
        .collect()
}
