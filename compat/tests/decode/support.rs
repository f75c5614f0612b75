//! Helpers shared by the decoder tests: decoding shortcuts and a JSON
//! rendering of decoded graphs.

use serde_json::{Value, json};
use tensorshare_compat::pickle::{
    Construction, DecodeError, DecodeErrorCode, Decoded, Limits, Node, NodeId, Pickle, decode_all,
};

use super::golden::GOLDENS;

pub fn allow_all(_: &str, _: &str) -> bool {
    true
}

pub fn decode_trusted(bytes: &[u8]) -> Decoded {
    decode_all(bytes, &allow_all, &Limits::default())
        .unwrap_or_else(|err| panic!("{err} decoding {bytes:?}"))
}

pub fn decode_err(bytes: &[u8]) -> DecodeError {
    decode_err_with(bytes, &Limits::default())
}

pub fn decode_err_with(bytes: &[u8], limits: &Limits) -> DecodeError {
    match decode_all(bytes, &allow_all, limits) {
        Ok(decoded) => panic!("decoded {bytes:?} into {:?}", decoded.pickle),
        Err(err) => err,
    }
}

pub fn golden(name: &str) -> &'static [u8] {
    GOLDENS
        .iter()
        .find(|golden| golden.name == name)
        .map(|golden| golden.bytes)
        .unwrap()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The decoded graph as JSON, in the shape the golden generator writes.
/// Recursive: fine for trusted test data.
pub fn render(pickle: &Pickle, id: NodeId, path: &mut Vec<NodeId>) -> Value {
    let node = pickle.get(id).unwrap();
    match node {
        Node::None => return Value::Null,
        Node::Bool(value) => return json!(value),
        Node::Int(value) => return json!(value),
        Node::BigInt(bytes) => return json!({ "bigint": hex(bytes) }),
        Node::Float(value) => return json!({ "float": format!("{:016x}", value.to_bits()) }),
        Node::Str(value) => return json!(value),
        Node::Bytes(bytes) => return json!({ "bytes": hex(&bytes.contiguous()) }),
        Node::ByteArray(bytes) => return json!({ "bytearray": hex(&bytes.contiguous()) }),
        Node::Global(global) => return json!({ "global": [global.module, global.name] }),
        _ if path.contains(&id) => return json!({ "cycle": null }),
        _ => {}
    }
    path.push(id);
    let mut all = |ids: &[NodeId]| -> Vec<Value> {
        ids.iter().map(|&item| render(pickle, item, path)).collect()
    };
    let value = match node {
        Node::Tuple(items) => json!({ "tuple": all(items) }),
        Node::List(items) => Value::Array(all(items)),
        Node::Set(items) => json!({ "set": all(items) }),
        Node::FrozenSet(items) => json!({ "frozenset": all(items) }),
        Node::Dict(pairs) => json!({ "dict": render_pairs(pickle, pairs, path) }),
        Node::PersistentId(pid) => json!({ "persid": render(pickle, *pid, path) }),
        Node::Object(object) => {
            let mut out = serde_json::Map::new();
            out.insert("call".into(), render(pickle, object.callable, path));
            let (how, args) = match object.construction {
                Construction::Reduce { args } => ("reduce", args),
                Construction::NewObj { args } => ("newobj", args),
                Construction::NewObjEx { args, kwargs } => {
                    out.insert("kwargs".into(), render(pickle, kwargs, path));
                    ("newobj_ex", args)
                }
            };
            out.insert("how".into(), how.into());
            out.insert("args".into(), render(pickle, args, path));
            if let Some(state) = object.state {
                out.insert("state".into(), render(pickle, state, path));
            }
            if !object.list_items.is_empty() {
                let items = object
                    .list_items
                    .iter()
                    .map(|&item| render(pickle, item, path));
                out.insert("list_items".into(), Value::Array(items.collect()));
            }
            if !object.dict_items.is_empty() {
                out.insert(
                    "dict_items".into(),
                    render_pairs(pickle, &object.dict_items, path),
                );
            }
            Value::Object(out)
        }
        _ => unreachable!("scalars returned above"),
    };
    path.pop();
    value
}

pub fn render_pairs(pickle: &Pickle, pairs: &[(NodeId, NodeId)], path: &mut Vec<NodeId>) -> Value {
    pairs
        .iter()
        .map(|&(key, value)| json!([render(pickle, key, path), render(pickle, value, path)]))
        .collect()
}

pub fn render_root(pickle: &Pickle) -> Value {
    render(pickle, pickle.root().unwrap(), &mut Vec::new())
}

pub fn code(bytes: &[u8]) -> DecodeErrorCode {
    decode_err(bytes).code
}
