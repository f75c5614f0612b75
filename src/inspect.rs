//! `tensorshare inspect`: decode any torch pickle or `.pt` file without
//! executing anything and describe what is in it.
//!
//! # Examples
//!
//! ```
//! use tensorshare::inspect::{inspect, Format};
//! use tensorshare::Registry;
//!
//! // pickle.dumps([1, 'a'], protocol=2)
//! let report = inspect(b"\x80\x02]q\x00(K\x01X\x01\x00\x00\x00aq\x01e.", &Registry::default())?;
//! assert_eq!(report.format, Format::Pickle);
//! assert_eq!(report.to_json()["object"], serde_json::json!([1, "a"]));
//! # Ok::<(), tensorshare::Error>(())
//! ```

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{Map, Value as Json, json};
use tensorshare_compat::dtype::Scalar;
use tensorshare_compat::torch_save::TorchSaveFormat;

use crate::{Error, Registry, Storage, Tensor, Value};

/// Elements shown per tensor.
pub const HEAD_ELEMENTS: usize = 8;

/// What kind of file was inspected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A pickle (`ForkingPickler` with any strategy, or plain `pickle`).
    Pickle,
    /// A `torch.save` zip file.
    TorchSaveZip,
    /// A legacy (pre-1.6 default) `torch.save` file.
    TorchSaveLegacy,
}

impl Format {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Format::Pickle => "pickle",
            Format::TorchSaveZip => "torch.save zip",
            Format::TorchSaveLegacy => "torch.save legacy",
        }
    }
}

/// A decoded file, ready to print.
#[derive(Debug)]
pub struct Report {
    /// The file's format.
    pub format: Format,
    /// The rebuilt object.
    pub object: Value,
}

/// The first bytes of a legacy `torch.save` stream: protocol 2 and the
/// magic number `0x1950a86a20f9469cfc6c` as `LONG1`.
const LEGACY_MAGIC: &[u8] = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19";

/// Decodes `bytes` as a torch pickle or `torch.save` file.
///
/// # Errors
///
/// Any [`Error`] of decoding or rebuilding: a disallowed global, a malformed
/// or truncated stream, a view outside its storage.
pub fn inspect(bytes: &[u8], registry: &Registry) -> Result<Report, Error> {
    if bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(LEGACY_MAGIC) {
        let (format, object) = crate::archive::load_torch_save(bytes, registry)?;
        let format = match format {
            TorchSaveFormat::Zip => Format::TorchSaveZip,
            TorchSaveFormat::Legacy => Format::TorchSaveLegacy,
        };
        return Ok(Report { format, object });
    }
    Ok(Report {
        format: Format::Pickle,
        object: registry.loads(bytes)?,
    })
}

impl Report {
    /// The report as JSON: `format`, the `object` tree, and `tensors` (every
    /// tensor occurrence, depth first).
    pub fn to_json(&self) -> Json {
        let mut ids = Ids::default();
        let object = ids.value_json(&self.object);
        let tensors: Vec<Json> = self
            .object
            .tensors()
            .into_iter()
            .map(|t| ids.tensor_json(t))
            .collect();
        json!({ "format": self.format.name(), "object": object, "tensors": tensors })
    }

    /// The report as an indented text tree.
    pub fn to_text(&self) -> String {
        let mut ids = Ids::default();
        let mut out = format!("format: {}\n", self.format.name());
        let mut stack = vec![(0usize, String::new(), &self.object)];
        while let Some((indent, label, value)) = stack.pop() {
            let pad = "  ".repeat(indent);
            let children: Vec<(String, &Value)> = match value {
                Value::Tuple(items)
                | Value::List(items)
                | Value::Set(items)
                | Value::FrozenSet(items) => items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (format!("[{i}] "), v))
                    .collect(),
                Value::Dict(items) | Value::OrderedDict(items) => items
                    .iter()
                    .map(|(k, v)| (format!("{}: ", short(k)), v))
                    .collect(),
                _ => Vec::new(),
            };
            let _ = writeln!(out, "{pad}{label}{}", ids.describe(value));
            for (label, child) in children.into_iter().rev() {
                stack.push((indent + 1, label, child));
            }
        }
        out
    }
}

/// Stable small ids for tensors and storages, by first appearance.
#[derive(Default)]
struct Ids {
    tensors: HashMap<usize, usize>,
    storages: HashMap<usize, usize>,
}

impl Ids {
    fn tensor(&mut self, t: &Tensor) -> usize {
        let next = self.tensors.len();
        *self.tensors.entry(t.identity()).or_insert(next)
    }

    fn storage(&mut self, s: &Storage) -> usize {
        let next = self.storages.len();
        *self.storages.entry(s.identity()).or_insert(next)
    }

    fn storage_json(&mut self, s: &Storage) -> Json {
        json!({ "id": self.storage(s), "kind": s.kind().name(), "nbytes": s.nbytes() })
    }

    fn tensor_json(&mut self, t: &Tensor) -> Json {
        let mut fields = Map::new();
        fields.insert("type".into(), json!("tensor"));
        fields.insert("id".into(), json!(self.tensor(t)));
        fields.insert("dtype".into(), json!(t.dtype().name()));
        fields.insert("shape".into(), json!(t.sizes()));
        fields.insert("stride".into(), json!(t.strides()));
        fields.insert("storage_offset".into(), json!(t.storage_offset()));
        fields.insert("requires_grad".into(), json!(t.requires_grad()));
        fields.insert("parameter".into(), json!(t.is_parameter()));
        fields.insert("storage".into(), self.storage_json(t.storage()));
        if let Some(head) = head(t) {
            fields.insert(
                "head".into(),
                Json::Array(head.iter().map(scalar_json).collect()),
            );
        }
        Json::Object(fields)
    }

    /// The object tree as JSON; recursion depth is bounded by the decoder's
    /// nesting limit.
    fn value_json(&mut self, value: &Value) -> Json {
        let tagged = |kind: &str, items: Json| json!({ "type": kind, "items": items });
        match value {
            Value::None => Json::Null,
            Value::Bool(b) => json!(b),
            Value::Int(i) => json!(i),
            Value::BigInt(bytes) => json!({ "type": "int", "value": big_int_decimal(bytes) }),
            Value::Float(f) => float_json(*f),
            Value::Str(s) => json!(s),
            Value::Bytes(b) => json!({ "type": "bytes", "len": b.len(), "head": hex(b) }),
            Value::ByteArray(b) => json!({ "type": "bytearray", "len": b.len(), "head": hex(b) }),
            Value::List(items) => Json::Array(items.iter().map(|v| self.value_json(v)).collect()),
            Value::Tuple(items) => tagged("tuple", self.values_json(items)),
            Value::Set(items) => tagged("set", self.values_json(items)),
            Value::FrozenSet(items) => tagged("frozenset", self.values_json(items)),
            Value::Dict(items) => tagged("dict", self.pairs_json(items)),
            Value::OrderedDict(items) => tagged("OrderedDict", self.pairs_json(items)),
            Value::Tensor(t) => self.tensor_json(t),
            Value::Storage(s) => {
                let mut storage = self.storage_json(s);
                storage["type"] = json!("storage");
                storage
            }
            Value::TypedStorage(s, dtype) => {
                let mut storage = self.storage_json(s);
                storage["type"] = json!("storage");
                storage["dtype"] = json!(dtype.name());
                storage
            }
            Value::DType(d) => json!({ "type": "dtype", "name": d.name() }),
            Value::Size(dims) => json!({ "type": "Size", "value": dims }),
            Value::Global(g) => json!({ "type": "global", "name": g.to_string() }),
            Value::Callable(c) => json!({ "type": "global", "name": c.name().to_string() }),
            Value::Custom(c) => json!({ "type": "object", "class": c.global.to_string() }),
        }
    }

    fn values_json(&mut self, items: &[Value]) -> Json {
        Json::Array(items.iter().map(|v| self.value_json(v)).collect())
    }

    fn pairs_json(&mut self, items: &[(Value, Value)]) -> Json {
        Json::Array(
            items
                .iter()
                .map(|(k, v)| json!([self.value_json(k), self.value_json(v)]))
                .collect(),
        )
    }

    /// One line describing a value (containers by their size).
    fn describe(&mut self, value: &Value) -> String {
        match value {
            Value::Tensor(t) => {
                let id = self.tensor(t);
                let storage = self.storage(t.storage());
                let mut line = format!(
                    "tensor #{id} {} shape {:?} stride {:?} offset {}{}{}  storage #{storage} {} {} bytes",
                    t.dtype(),
                    t.sizes(),
                    t.strides(),
                    t.storage_offset(),
                    if t.requires_grad() {
                        " requires_grad"
                    } else {
                        ""
                    },
                    if t.is_parameter() { " Parameter" } else { "" },
                    t.storage().kind(),
                    t.storage().nbytes(),
                );
                if let Some(head) = head(t) {
                    let shown: Vec<String> =
                        head.iter().map(|s| scalar_json(s).to_string()).collect();
                    let more = if t.numel() > head.len() { ", ..." } else { "" };
                    let _ = write!(line, "  [{}{more}]", shown.join(", "));
                }
                line
            }
            Value::List(items) => format!("list ({} items)", items.len()),
            Value::Tuple(items) => format!("tuple ({} items)", items.len()),
            Value::Set(items) => format!("set ({} items)", items.len()),
            Value::FrozenSet(items) => format!("frozenset ({} items)", items.len()),
            Value::Dict(items) => format!("dict ({} items)", items.len()),
            Value::OrderedDict(items) => format!("OrderedDict ({} items)", items.len()),
            other => self.value_json(other).to_string(),
        }
    }
}

/// A dict key, briefly.
fn short(key: &Value) -> String {
    match key {
        Value::Str(s) => format!("{s:?}"),
        Value::Int(i) => i.to_string(),
        other => other.type_name().to_owned(),
    }
}

/// Up to [`HEAD_ELEMENTS`] elements in logical order, when the bytes are here.
pub fn head(t: &Tensor) -> Option<Vec<Scalar>> {
    if matches!(t.dtype(), crate::DType::Float4E2M1FnX2) {
        return None;
    }
    let elements = t.elements()?;
    elements
        .take(HEAD_ELEMENTS)
        .map(|bytes| t.dtype().decode_element(bytes))
        .collect()
}

fn float_json(f: f64) -> Json {
    if f.is_nan() {
        json!("nan")
    } else if f.is_infinite() {
        json!(if f > 0.0 { "inf" } else { "-inf" })
    } else {
        json!(f)
    }
}

/// An element as JSON, in the form `inspect --json` documents.
pub fn scalar_json(scalar: &Scalar) -> Json {
    match *scalar {
        Scalar::Bool(b) => json!(b),
        Scalar::Int(i) => json!(i),
        Scalar::UInt(u) => json!(u),
        Scalar::Float(f) => float_json(f),
        Scalar::Complex(re, im) | Scalar::PackedFloat4(re, im) => {
            json!([float_json(re), float_json(im)])
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().take(32).map(|b| format!("{b:02x}")).collect()
}

/// Decimal digits of a little-endian two's-complement integer of any width.
fn big_int_decimal(bytes: &[u8]) -> String {
    let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
    // Magnitude as little-endian bytes.
    let mut magnitude: Vec<u8> = if negative {
        let mut carry = true;
        bytes
            .iter()
            .map(|&b| {
                let (v, c) = (!b).overflowing_add(u8::from(carry));
                carry = c;
                v
            })
            .collect()
    } else {
        bytes.to_vec()
    };
    let mut digits = Vec::new();
    while magnitude.iter().any(|&b| b != 0) {
        let mut remainder = 0u32;
        for byte in magnitude.iter_mut().rev() {
            let acc = (remainder << 8) | u32::from(*byte);
            *byte = (acc / 10) as u8;
            remainder = acc % 10;
        }
        digits.push(char::from(b'0' + remainder as u8));
    }
    if digits.is_empty() {
        digits.push('0');
    }
    if negative {
        digits.push('-');
    }
    digits.iter().rev().collect()
}

#[cfg(test)]
mod tests {
    use super::big_int_decimal;

    #[test]
    fn big_ints_print_in_decimal() {
        assert_eq!(big_int_decimal(&[]), "0");
        assert_eq!(big_int_decimal(&[0xff]), "-1");
        assert_eq!(big_int_decimal(&[0x00, 0x01]), "256");
        // 2**64 as LONG1 carries it.
        assert_eq!(
            big_int_decimal(&[0, 0, 0, 0, 0, 0, 0, 0, 1]),
            "18446744073709551616"
        );
        assert_eq!(
            big_int_decimal(&[0, 0, 0, 0, 0, 0, 0, 0, 0xff]),
            "-18446744073709551616"
        );
    }
}
