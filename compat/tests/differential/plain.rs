//! Plain data read by both decoders, as serde-pickle's `Value`: shared by
//! the differential proptest and the fuzz target.

use std::collections::{BTreeMap, BTreeSet};

use num_bigint::BigInt;
use serde_pickle::{DeOptions, HashableValue, Value};
use tensorshare_compat::pickle::{Construction, Limits, Node, NodeId, Pickle, decode_all};

/// The globals a plain-data pickle names: the forms CPython writes sets,
/// frozensets and bytes in where a protocol has no opcode for them.
pub fn plain_global(module: &str, name: &str) -> bool {
    matches!(
        (module, name),
        ("builtins", "set" | "frozenset" | "bytearray" | "bytes") | ("_codecs", "encode")
    )
}

/// The most nodes read into one value: a pickle of shared references can
/// stand for far more than its size.
const BUDGET: usize = 100_000;

/// The deepest value read: deeper ones are not compared, as serde-pickle's
/// values (and this reader) recurse, and a pickle of a few hundred
/// kilobytes can nest a hundred thousand deep.
const MAX_DEPTH: usize = 256;

/// Our decoder's reading of `bytes`: `Err` with why it refused; `Ok(None)`
/// when it read something outside plain data (a global left uncalled, a
/// cycle, more than the budget, deeper than [`MAX_DEPTH`]).
pub fn ours(bytes: &[u8]) -> Result<Option<Value>, String> {
    let decoded =
        decode_all(bytes, &plain_global, &Limits::default()).map_err(|e| e.to_string())?;
    let pickle = decoded.pickle;
    let Some(root) = pickle.root() else {
        return Ok(None);
    };
    let mut budget = BUDGET;
    Ok(convert(&pickle, root, &mut Vec::new(), &mut budget).map(normalize))
}

/// serde-pickle's reading of `bytes`, Python 2 strings decoded as CPython 3
/// decodes them by default. Only for input [`ours`] read as plain data: it
/// recurses as deep as the input nests.
pub fn theirs(bytes: &[u8]) -> Result<Value, String> {
    serde_pickle::value_from_slice(bytes, DeOptions::new().decode_strings())
        .map(normalize)
        .map_err(|e| e.to_string())
}

/// How two readings are compared: floats by their bits, as `Debug` shows
/// `NaN` and `-0.0`.
pub fn same(a: &Value, b: &Value) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

fn convert(
    pickle: &Pickle,
    id: NodeId,
    path: &mut Vec<NodeId>,
    budget: &mut usize,
) -> Option<Value> {
    if path.contains(&id) || path.len() >= MAX_DEPTH || *budget == 0 {
        return None;
    }
    *budget -= 1;
    path.push(id);
    let value = convert_node(pickle, pickle.get(id)?, path, budget);
    path.pop();
    value
}

fn convert_node(
    pickle: &Pickle,
    node: &Node,
    path: &mut Vec<NodeId>,
    budget: &mut usize,
) -> Option<Value> {
    let mut all = |ids: &[NodeId]| -> Option<Vec<Value>> {
        ids.iter()
            .map(|&id| convert(pickle, id, path, budget))
            .collect()
    };
    Some(match node {
        Node::None => Value::None,
        Node::Bool(b) => Value::Bool(*b),
        Node::Int(i) => Value::I64(*i),
        Node::BigInt(bytes) => Value::Int(BigInt::from_signed_bytes_le(bytes)),
        Node::Float(f) => Value::F64(*f),
        Node::Str(s) => Value::String(s.clone()),
        // serde-pickle reads a bytearray as bytes.
        Node::Bytes(b) | Node::ByteArray(b) => Value::Bytes(b.to_vec()),
        Node::Tuple(items) => Value::Tuple(all(items)?),
        Node::List(items) => Value::List(all(items)?),
        Node::Set(items) => Value::Set(hashable(all(items)?)?),
        Node::FrozenSet(items) => Value::FrozenSet(hashable(all(items)?)?),
        Node::Dict(pairs) => {
            let mut dict = BTreeMap::new();
            for &(key, value) in pairs {
                let key = convert(pickle, key, path, budget)?.into_hashable().ok()?;
                // A key set twice keeps its last value, as in Python.
                dict.insert(key, convert(pickle, value, path, budget)?);
            }
            Value::Dict(dict)
        }
        Node::Object(object) => {
            let Construction::Reduce { args } = object.construction else {
                return None;
            };
            let Some(Node::Global(global)) = pickle.get(object.callable) else {
                return None;
            };
            if object.state.is_some()
                || !object.list_items.is_empty()
                || !object.dict_items.is_empty()
            {
                return None;
            }
            let Some(Node::Tuple(args)) = pickle.get(args) else {
                return None;
            };
            let args = all(args)?;
            match (&*global.module, &*global.name, args.as_slice()) {
                ("builtins", "set", []) => Value::Set(BTreeSet::new()),
                ("builtins", "frozenset", []) => Value::FrozenSet(BTreeSet::new()),
                ("builtins", "set", [Value::List(items)]) => Value::Set(hashable(items.clone())?),
                ("builtins", "frozenset", [Value::List(items)]) => {
                    Value::FrozenSet(hashable(items.clone())?)
                }
                ("builtins", "bytearray", [Value::Bytes(b)]) => Value::Bytes(b.clone()),
                ("builtins", "bytes", []) => Value::Bytes(Vec::new()),
                ("_codecs", "encode", [Value::String(s), Value::String(codec)])
                    if codec == "latin1" =>
                {
                    Value::Bytes(
                        s.chars()
                            .map(|c| u8::try_from(u32::from(c)).ok())
                            .collect::<Option<_>>()?,
                    )
                }
                _ => return None,
            }
        }
        Node::Global(_) | Node::PersistentId(_) => return None,
    })
}

fn hashable(items: Vec<Value>) -> Option<BTreeSet<HashableValue>> {
    items.into_iter().map(|v| v.into_hashable().ok()).collect()
}

/// One spelling per value: an int that fits 64 bits is `I64` whichever
/// opcode carried it.
pub fn normalize(value: Value) -> Value {
    match value {
        Value::Int(big) => match i64::try_from(&big) {
            Ok(small) => Value::I64(small),
            Err(_) => Value::Int(big),
        },
        Value::List(items) => Value::List(items.into_iter().map(normalize).collect()),
        Value::Tuple(items) => Value::Tuple(items.into_iter().map(normalize).collect()),
        Value::Set(items) => Value::Set(items.into_iter().map(normalize_key).collect()),
        Value::FrozenSet(items) => Value::FrozenSet(items.into_iter().map(normalize_key).collect()),
        Value::Dict(pairs) => Value::Dict(
            pairs
                .into_iter()
                .map(|(k, v)| (normalize_key(k), normalize(v)))
                .collect(),
        ),
        other => other,
    }
}

fn normalize_key(key: HashableValue) -> HashableValue {
    normalize(key.into_value())
        .into_hashable()
        .expect("a hashable value stays hashable")
}
