//! The report as JSON, written as it is walked: memory holds the decoded
//! file and the ids given so far, never the document, so a checkpoint of
//! 200,000 tensors prints in the memory its pickle takes.
//!
//! The tree refers to each tensor by id, and `tensors` describes each once,
//! leaving out the fields that hold their usual value (see
//! [`Detail::all_fields`]).

use std::io::Write;

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value as Json;
use tensorshare::inspect::head;
use tensorshare::model::{self, Opaque, OpaqueCall, Storage};
use tensorshare::{DType, Tensor, Value};

use super::{
    CappedIndent, Detail, Occurrence, Walk, big_int_decimal, float_json, hex, json_type,
    opcode_name, scalar_json,
};

/// Writes the report to `out` as JSON: compact, or `indented` two spaces
/// a level up to [`MAX_INDENT`](super::MAX_INDENT) levels; then a newline.
///
/// # Errors
///
/// The errors of writing to `out`.
pub fn write_json(
    report: &tensorshare::inspect::Report,
    detail: Detail,
    mut out: impl Write,
    indented: bool,
) -> std::io::Result<()> {
    let walk = Walk::new(&report.object, detail);
    let document = Document {
        walk: &walk,
        report,
    };
    if indented {
        let mut serializer =
            serde_json::Serializer::with_formatter(&mut out, CappedIndent::default());
        document.serialize(&mut serializer)?;
    } else {
        document.serialize(&mut serde_json::Serializer::new(&mut out))?;
    }
    out.write_all(b"\n")?;
    out.flush()
}

/// The report as a JSON value, as [`write_json`] writes it.
pub fn to_json_with(report: &tensorshare::inspect::Report, detail: Detail) -> Json {
    let walk = Walk::new(&report.object, detail);
    // Building a `serde_json::Value` fails only for a map key that is not
    // a string, and every key here is one.
    serde_json::to_value(Document {
        walk: &walk,
        report,
    })
    .unwrap_or(Json::Null)
}

impl Walk {
    pub(super) fn node<'a>(&'a self, value: &'a Value) -> Node<'a> {
        Node { walk: self, value }
    }

    fn nodes<'a>(&'a self, values: &'a [Value]) -> Nodes<'a> {
        Nodes { walk: self, values }
    }

    fn pairs<'a>(&'a self, pairs: &'a [(Value, Value)]) -> Pairs<'a> {
        Pairs { walk: self, pairs }
    }
}

/// `{"format", "object", "tensors"}`.
struct Document<'a> {
    walk: &'a Walk,
    report: &'a tensorshare::inspect::Report,
}

impl Serialize for Document<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("format", self.report.format.name())?;
        // The tree first: it gives the tensors their ids, in the order the
        // walk meets them.
        map.serialize_entry("object", &self.walk.node(&self.report.object))?;
        let tensors = self.report.object.tensors();
        map.serialize_entry(
            "tensors",
            &Entries {
                walk: self.walk,
                tensors: &tensors,
            },
        )?;
        map.end()
    }
}

/// A value of the tree.
pub(super) struct Node<'a> {
    walk: &'a Walk,
    value: &'a Value,
}

impl Serialize for Node<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let value = self.value;
        if let Value::Tensor(t) = value {
            let (id, _) = self.walk.ids.borrow_mut().tensor(t);
            return reference(serializer, "tensor", id);
        }
        let occurrence = self.walk.ids.borrow_mut().occurrence(value);
        let id = match occurrence {
            Occurrence::Again(id) => return reference(serializer, json_type(value), id),
            Occurrence::First(id) => Some(id),
            Occurrence::Only => None,
        };
        match value {
            Value::None => return serializer.serialize_unit(),
            Value::Bool(b) => return serializer.serialize_bool(*b),
            Value::Int(i) => return serializer.serialize_i64(*i),
            Value::Float(f) => return float_json(*f, DType::Float64).serialize(serializer),
            Value::List(items) if id.is_none() => {
                return self.walk.nodes(items).serialize(serializer);
            }
            Value::Str(s) if id.is_none() => return serializer.serialize_str(s),
            _ => {}
        }
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("type", json_type(value))?;
        if let Some(id) = id {
            map.serialize_entry("id", &id)?;
        }
        self.fields(&mut map)?;
        map.end()
    }
}

impl Node<'_> {
    /// The fields of a value shown as an object, after its `type` and `id`.
    fn fields<M: SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
        let walk = self.walk;
        match self.value {
            Value::BigInt(bytes) => map.serialize_entry("value", &big_int_decimal(bytes)),
            Value::Str(s) => map.serialize_entry("value", &**s),
            Value::Bytes(b) => {
                map.serialize_entry("len", &b.len())?;
                map.serialize_entry("head", &hex(b))
            }
            Value::ByteArray(b) => {
                map.serialize_entry("len", &b.len())?;
                map.serialize_entry("head", &hex(b))
            }
            Value::Tuple(items)
            | Value::List(items)
            | Value::Set(items)
            | Value::FrozenSet(items) => map.serialize_entry("items", &walk.nodes(items)),
            Value::Dict(pairs) => map.serialize_entry("items", &walk.pairs(pairs)),
            Value::OrderedDict(pairs, attributes) => {
                map.serialize_entry("items", &walk.pairs(pairs))?;
                if attributes.iter().len() == 0 {
                    return Ok(());
                }
                map.serialize_entry("attributes", &Attributes { walk, attributes })
            }
            Value::Storage(s) => storage_fields(walk, map, s),
            Value::TypedStorage(s, dtype) => {
                storage_fields(walk, map, s)?;
                map.serialize_entry("dtype", dtype.name())
            }
            Value::DType(d) => map.serialize_entry("name", d.name()),
            Value::Size(dims) => map.serialize_entry("value", &**dims),
            Value::Global(g) => map.serialize_entry("name", &g.to_string()),
            Value::Callable(c) => map.serialize_entry("name", &c.name().to_string()),
            Value::Custom(c) => map.serialize_entry("class", &c.global.to_string()),
            Value::Opaque(opaque) => match &**opaque {
                Opaque::Global(g) => {
                    map.serialize_entry("name", &g.to_string())?;
                    map.serialize_entry("allowed", &false)
                }
                Opaque::Call(call) => call_fields(walk, map, call),
            },
            // Shown before reaching here: scalars as JSON values, tensors
            // by reference.
            Value::None | Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::Tensor(_) => {
                Ok(())
            }
        }
    }
}

fn call_fields<M: SerializeMap>(
    walk: &Walk,
    map: &mut M,
    call: &OpaqueCall,
) -> Result<(), M::Error> {
    match call.callee_name() {
        Some(global) => map.serialize_entry("global", &global.to_string())?,
        None => map.serialize_entry("callee", &walk.node(&call.callee))?,
    }
    map.serialize_entry("opcode", opcode_name(call.kind))?;
    map.serialize_entry("args", &walk.nodes(&call.args))?;
    if !call.kwargs.is_empty() {
        map.serialize_entry("kwargs", &walk.pairs(&call.kwargs))?;
    }
    if let Some(state) = &call.state {
        map.serialize_entry("state", &walk.node(state))?;
    }
    if !call.list_items.is_empty() {
        map.serialize_entry("appends", &walk.nodes(&call.list_items))?;
    }
    if !call.dict_items.is_empty() {
        map.serialize_entry("setitems", &walk.pairs(&call.dict_items))?;
    }
    if let Some(refused) = &call.refused {
        map.serialize_entry("refused", refused)?;
    }
    Ok(())
}

/// `id`, `kind`, `nbytes`, and `location` for a storage read from a
/// `torch.save` file.
fn storage_fields<M: SerializeMap>(walk: &Walk, map: &mut M, s: &Storage) -> Result<(), M::Error> {
    map.serialize_entry("id", &walk.ids.borrow_mut().storage(s))?;
    map.serialize_entry("kind", s.kind().name())?;
    map.serialize_entry("nbytes", &s.nbytes())?;
    if let Some(location) = s.saved_location() {
        map.serialize_entry("location", location)?;
    }
    Ok(())
}

/// `{"type": kind, "ref": id}`: a value shown before.
fn reference<S: Serializer>(serializer: S, kind: &str, id: usize) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(2))?;
    map.serialize_entry("type", kind)?;
    map.serialize_entry("ref", &id)?;
    map.end()
}

struct Nodes<'a> {
    walk: &'a Walk,
    values: &'a [Value],
}

impl Serialize for Nodes<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.values.iter().map(|value| self.walk.node(value)))
    }
}

/// Dict items as `[key, value]` pairs.
struct Pairs<'a> {
    walk: &'a Walk,
    pairs: &'a [(Value, Value)],
}

impl Serialize for Pairs<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.pairs.len()))?;
        for (key, value) in self.pairs {
            seq.serialize_element(&(self.walk.node(key), self.walk.node(value)))?;
        }
        seq.end()
    }
}

/// An object's attributes, `{name: node}`.
struct Attributes<'a> {
    walk: &'a Walk,
    attributes: &'a model::Attributes,
}

impl Serialize for Attributes<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let named = self.attributes.iter();
        serializer.collect_map(named.map(|(name, value)| (name, self.walk.node(value))))
    }
}

/// The `tensors` list.
struct Entries<'a> {
    walk: &'a Walk,
    tensors: &'a [&'a Tensor],
}

impl Serialize for Entries<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.tensors.iter().map(|&tensor| Entry {
            walk: self.walk,
            tensor,
        }))
    }
}

/// One tensor of the `tensors` list: `id`, `dtype`, `shape`, `storage`
/// and `head`, with `stride`, `storage_offset`, `requires_grad` and
/// `parameter` when they differ from a fresh contiguous tensor's (or
/// always, with [`Detail::all_fields`]).
struct Entry<'a> {
    walk: &'a Walk,
    tensor: &'a Tensor,
}

impl Serialize for Entry<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (t, walk) = (self.tensor, self.walk);
        let all = walk.detail.all_fields;
        let (id, _) = walk.ids.borrow_mut().tensor(t);
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("id", &id)?;
        map.serialize_entry("dtype", t.dtype().name())?;
        map.serialize_entry("shape", t.sizes())?;
        if all || !t.is_contiguous() {
            map.serialize_entry("stride", t.strides())?;
        }
        if all || t.storage_offset() != 0 {
            map.serialize_entry("storage_offset", &t.storage_offset())?;
        }
        if all || t.requires_grad() {
            map.serialize_entry("requires_grad", &t.requires_grad())?;
        }
        if all || t.is_parameter() {
            map.serialize_entry("parameter", &t.is_parameter())?;
        }
        map.serialize_entry(
            "storage",
            &StorageEntry {
                walk,
                storage: t.storage(),
            },
        )?;
        if let Some(head) = head(t, walk.detail.head).filter(|_| walk.detail.head > 0) {
            let head: Vec<Json> = head.iter().map(|s| scalar_json(s, t.dtype())).collect();
            map.serialize_entry("head", &head)?;
        }
        map.end()
    }
}

struct StorageEntry<'a> {
    walk: &'a Walk,
    storage: &'a Storage,
}

impl Serialize for StorageEntry<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        storage_fields(self.walk, &mut map, self.storage)?;
        map.end()
    }
}

/// A value as the JSON it is shown as, for the text form's leaves.
pub(super) fn to_json_value(node: Node<'_>) -> Json {
    // As in `to_json_with`: every key is a string.
    serde_json::to_value(node).unwrap_or(Json::Null)
}
