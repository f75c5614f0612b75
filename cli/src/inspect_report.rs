//! `tensorshare inspect`'s report: a decoded file
//! ([`tensorshare::inspect::Report`]) as JSON or as an indented text tree.
//!
//! Both forms are bounded by the input's size: an object the pickle
//! references from several places is shown in full once, with an `id`, and
//! as a reference after (`{"type": "list", "ref": 3}` in JSON, `list #3,
//! shown above` in text). Tensors have ids of their own: the JSON tree
//! refers to every tensor by its id and `tensors` describes each once; the
//! text describes a tensor where it first occurs. Strings of up to 64 bytes
//! and bytes-like values, whose display is short, are shown wherever they
//! occur.
//!
//! # Examples
//!
//! ```
//! use tensorshare::inspect::inspect;
//! use tensorshare::Registry;
//! use tensorshare_cli::inspect_report;
//!
//! // pickle.dumps([1, 'a'], protocol=2)
//! let report = inspect(b"\x80\x02]q\x00(K\x01X\x01\x00\x00\x00aq\x01e.", &Registry::default())?;
//! assert_eq!(inspect_report::to_json(&report)["format"], "pickle");
//! assert_eq!(inspect_report::to_json(&report)["object"], serde_json::json!([1, "a"]));
//!
//! // l = []; pickle.dumps([l, l], protocol=2): the shared list is shown once.
//! let report = inspect(b"\x80\x02]q\x00(]q\x01h\x01e.", &Registry::default())?;
//! assert_eq!(
//!     inspect_report::to_json(&report)["object"],
//!     serde_json::json!([{"type": "list", "id": 0, "items": []}, {"type": "list", "ref": 0}])
//! );
//! assert_eq!(
//!     inspect_report::to_text(&report),
//!     "format: pickle\nlist (2 items)\n  [0] list #0 (0 items)\n  [1] list #0, shown above\n"
//! );
//! # Ok::<(), tensorshare::Error>(())
//! ```

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt::Write as _;

use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::{Value as Json, json};
use tensorshare::inspect::{HEAD_ELEMENTS, Report, head};
use tensorshare::model::{Opaque, Scalar, Storage, StorageKind};
use tensorshare::registry::CallKind;
use tensorshare::{DType, StrategyKind, Tensor, Value};
use tensorshare_compat::pickle::Global;

mod json;

use json::to_json_value;
pub use json::{to_json_with, write_json};

/// Strings longer than this many bytes are shown once when shared.
const SHORT_STRING: usize = 64;

/// How much the report shows of each tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Detail {
    /// Elements shown from the start of each tensor, in logical order
    /// (`--head N`); 0 shows none.
    pub head: usize,
    /// In JSON, every field of every tensor (`--all-fields`): `stride`,
    /// `storage_offset`, `requires_grad` and `parameter` are otherwise left
    /// out where they hold a fresh contiguous tensor's values (row-major
    /// strides, 0, false, false), which most tensors of a checkpoint do.
    pub all_fields: bool,
}

impl Default for Detail {
    fn default() -> Self {
        Detail {
            head: HEAD_ELEMENTS,
            all_fields: false,
        }
    }
}

/// The report as JSON with the default [`Detail`]: `format`, the `object`
/// tree (tensors in it as references), and `tensors` (each distinct tensor
/// once, in order of first appearance). [`write_json`] writes the same
/// without building it.
pub fn to_json(report: &Report) -> Json {
    to_json_with(report, Detail::default())
}

/// The report as an indented text tree with the default [`Detail`].
pub fn to_text(report: &Report) -> String {
    to_text_with(report, Detail::default())
}

/// The report as an indented text tree, two spaces a level up to
/// [`MAX_INDENT`] levels; a deeper line starts with its level
/// (`(level 40)`).
pub fn to_text_with(report: &Report, detail: Detail) -> String {
    let walk = Walk::new(&report.object, detail);
    let mut out = format!("format: {}\n", report.format.name());
    let mut stack = vec![(0usize, String::new(), &report.object)];
    while let Some((level, label, value)) = stack.pop() {
        let (line, expand) = walk.describe(value);
        let _ = write!(out, "{}", "  ".repeat(level.min(MAX_INDENT)));
        if level > MAX_INDENT {
            let _ = write!(out, "(level {level}) ");
        }
        let _ = writeln!(out, "{label}{line}");
        if expand {
            for (label, child) in labeled_children(value).into_iter().rev() {
                stack.push((level + 1, label, child));
            }
        }
    }
    out
}

/// Nesting levels that [`to_text`] and an indented [`write_json`] indent.
pub const MAX_INDENT: usize = 16;

/// serde_json's pretty printing with the indentation capped at
/// [`MAX_INDENT`] levels.
#[derive(Default)]
struct CappedIndent {
    level: usize,
    has_value: bool,
}

impl CappedIndent {
    fn newline<W: ?Sized + std::io::Write>(&self, writer: &mut W) -> std::io::Result<()> {
        writer.write_all(b"\n")?;
        for _ in 0..self.level.min(MAX_INDENT) {
            writer.write_all(b"  ")?;
        }
        Ok(())
    }

    fn open<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.level += 1;
        self.has_value = false;
        writer.write_all(bracket)
    }

    fn close<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.level -= 1;
        if self.has_value {
            self.newline(writer)?;
        }
        writer.write_all(bracket)
    }

    fn item<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if !first {
            writer.write_all(b",")?;
        }
        self.newline(writer)
    }
}

impl serde_json::ser::Formatter for CappedIndent {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open(writer, b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close(writer, b"]")
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(writer, first)
    }

    fn end_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        _writer: &mut W,
    ) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open(writer, b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close(writer, b"}")
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        _writer: &mut W,
    ) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// How one occurrence of a value is shown.
enum Occurrence {
    /// Not shared, or too short to be worth an id: in full, without one.
    Only,
    /// The first of several: in full, with this id.
    First(usize),
    /// Shown before with this id: as a reference.
    Again(usize),
}

/// Ids for tensors, storages and shared objects, by first appearance.
struct Ids {
    /// Identities of the objects that occur more than once.
    repeated: FxHashSet<usize>,
    objects: FxHashMap<usize, usize>,
    tensors: FxHashMap<usize, usize>,
    storages: FxHashMap<usize, usize>,
}

impl Ids {
    fn new(root: &Value) -> Self {
        let mut seen = FxHashSet::default();
        let mut repeated = FxHashSet::default();
        let mut stack = vec![root];
        while let Some(value) = stack.pop() {
            if let Some(identity) = value.shared_identity()
                && !seen.insert(identity)
            {
                repeated.insert(identity);
                continue;
            }
            stack.extend(value.children());
        }
        Self {
            repeated,
            objects: FxHashMap::default(),
            tensors: FxHashMap::default(),
            storages: FxHashMap::default(),
        }
    }

    fn occurrence(&mut self, value: &Value) -> Occurrence {
        let short = match value {
            Value::Str(s) => s.len() <= SHORT_STRING,
            Value::ByteArray(_) => true,
            _ => false,
        };
        let Some(identity) = value.shared_identity().filter(|_| !short) else {
            return Occurrence::Only;
        };
        if !self.repeated.contains(&identity) {
            return Occurrence::Only;
        }
        let next = self.objects.len();
        match self.objects.get(&identity) {
            Some(&id) => Occurrence::Again(id),
            None => {
                self.objects.insert(identity, next);
                Occurrence::First(next)
            }
        }
    }

    /// The tensor's id, and whether it was shown before.
    fn tensor(&mut self, t: &Tensor) -> (usize, bool) {
        let next = self.tensors.len();
        match self.tensors.get(&t.identity()) {
            Some(&id) => (id, true),
            None => {
                self.tensors.insert(t.identity(), next);
                (next, false)
            }
        }
    }

    fn storage(&mut self, s: &Storage) -> usize {
        let next = self.storages.len();
        *self.storages.entry(s.identity()).or_insert(next)
    }
}

/// The ids given so far, and what to show: one walk over the report.
struct Walk {
    ids: RefCell<Ids>,
    detail: Detail,
}

impl Walk {
    fn new(root: &Value, detail: Detail) -> Self {
        Walk {
            ids: RefCell::new(Ids::new(root)),
            detail,
        }
    }

    /// One line describing a value, and whether its children follow on
    /// lines of their own (not for a shared object shown above).
    fn describe(&self, value: &Value) -> (String, bool) {
        if let Value::Tensor(t) = value {
            return (self.describe_tensor(t), false);
        }
        let occurrence = self.ids.borrow_mut().occurrence(value);
        let (tag, expand) = match occurrence {
            Occurrence::Again(id) => {
                return (format!("{} #{id}, shown above", json_type(value)), false);
            }
            Occurrence::First(id) => (format!(" #{id}"), true),
            Occurrence::Only => (String::new(), true),
        };
        let count = |n: usize, noun: &str| match n {
            1 => format!("1 {noun}"),
            n => format!("{n} {noun}s"),
        };
        let line = match value {
            Value::Tuple(items)
            | Value::List(items)
            | Value::Set(items)
            | Value::FrozenSet(items) => {
                format!("{}{tag} ({})", json_type(value), count(items.len(), "item"))
            }
            Value::Dict(pairs) => {
                format!("{}{tag} ({})", json_type(value), count(pairs.len(), "item"))
            }
            Value::OrderedDict(pairs, attributes) => {
                let set = match attributes.iter().len() {
                    0 => String::new(),
                    n => format!(", {}", count(n, "attribute")),
                };
                let items = count(pairs.len(), "item");
                format!("{}{tag} ({items}{set})", json_type(value))
            }
            Value::Str(s) if tag.is_empty() => format!("{s:?}"),
            Value::Str(s) => format!("str{tag} {s:?}"),
            Value::Opaque(opaque) => match &**opaque {
                Opaque::Global(g) => format!("global {g}{tag}, outside the allowlist"),
                Opaque::Call(call) => {
                    let callee = call
                        .callee_name()
                        .map_or_else(|| "a computed callee".to_owned(), Global::to_string);
                    let refused = match &call.refused {
                        Some(why) => format!(", refused: {why}"),
                        None => String::new(),
                    };
                    format!(
                        "call{tag} of {callee} by {}, not made{refused}",
                        opcode_name(call.kind)
                    )
                }
            },
            other => format!("{}{tag}", to_json_value(self.node(other))),
        };
        (line, expand)
    }

    fn describe_tensor(&self, t: &Tensor) -> String {
        let (id, shown) = self.ids.borrow_mut().tensor(t);
        if shown {
            return format!("tensor #{id}, shown above");
        }
        let storage = t.storage();
        let storage_id = self.ids.borrow_mut().storage(storage);
        let mut line = format!(
            "tensor #{id}: {} {:?}, stride {:?}, offset {}",
            t.dtype(),
            t.sizes(),
            t.strides(),
            t.storage_offset(),
        );
        if t.is_parameter() {
            line.push_str(", Parameter");
        }
        if t.requires_grad() {
            line.push_str(", requires_grad");
        }
        let _ = write!(
            line,
            "; storage #{storage_id}: {} bytes {}",
            storage.nbytes(),
            residence_phrase(storage.kind()),
        );
        if let Some(location) = storage.saved_location() {
            let _ = write!(line, ", saved on {location}");
        }
        if let Some(head) = head(t, self.detail.head).filter(|_| self.detail.head > 0) {
            let shown: Vec<String> = head.iter().map(|s| scalar_text(s, t.dtype())).collect();
            let more = if t.numel() > head.len() { ", ..." } else { "" };
            let _ = write!(line, "; [{}{more}]", shown.join(", "));
        }
        line
    }
}

/// Where a storage of `kind` keeps its bytes, as a phrase after "N bytes".
fn residence_phrase(kind: StorageKind) -> Cow<'static, str> {
    let phrase = match kind {
        StorageKind::Strategy(StrategyKind::Bytes) => "held in this process",
        StorageKind::Strategy(StrategyKind::FileDescriptor) => "shared by file descriptor",
        StorageKind::Strategy(StrategyKind::FileSystem) => "in a named shared-memory segment",
        StorageKind::Strategy(StrategyKind::Memmap) => "in a file mapped by each holder",
        StorageKind::Empty => "(empty)",
        StorageKind::Cuda => "on a GPU",
        #[allow(
            unreachable_patterns,
            reason = "the strategies a build has are listed above"
        )]
        StorageKind::Strategy(other) => return format!("in {other}'s memory").into(),
    };
    phrase.into()
}

/// The `type` a value has in JSON, and its name in text.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::BigInt(_) => "int",
        Value::Storage(_) | Value::TypedStorage(..) => "storage",
        Value::Global(_) | Value::Callable(_) => "global",
        Value::Custom(_) => "object",
        Value::Opaque(opaque) => match **opaque {
            Opaque::Global(_) => "global",
            Opaque::Call(_) => "call",
        },
        other => other.type_name(),
    }
}

fn opcode_name(kind: CallKind) -> &'static str {
    match kind {
        CallKind::Reduce => "REDUCE",
        CallKind::NewObj => "NEWOBJ",
        CallKind::NewObjEx => "NEWOBJ_EX",
    }
}

/// The children of a value with the labels the text form puts before them.
fn labeled_children(value: &Value) -> Vec<(String, &Value)> {
    let mut children = Vec::new();
    match value {
        Value::Tuple(items) | Value::List(items) | Value::Set(items) | Value::FrozenSet(items) => {
            indexed(&mut children, "", items);
        }
        Value::Dict(pairs) => keyed(&mut children, "", pairs),
        Value::OrderedDict(pairs, attributes) => {
            keyed(&mut children, "", pairs);
            let set = attributes.iter();
            children.extend(set.map(|(name, value)| (format!(".{name} = "), value)));
        }
        Value::Opaque(opaque) => {
            if let Opaque::Call(call) = &**opaque {
                if call.callee_name().is_none() {
                    children.push(("callee: ".to_owned(), &call.callee));
                }
                indexed(&mut children, "arg", &call.args);
                keyed(&mut children, "kwarg ", &call.kwargs);
                children.extend(call.state.iter().map(|s| ("state: ".to_owned(), s)));
                indexed(&mut children, "append", &call.list_items);
                keyed(&mut children, "setitem ", &call.dict_items);
            }
        }
        _ => {}
    }
    children
}

fn indexed<'a>(out: &mut Vec<(String, &'a Value)>, prefix: &str, items: &'a [Value]) {
    let labeled = items.iter().enumerate();
    out.extend(labeled.map(|(i, v)| (format!("{prefix}[{i}] "), v)));
}

fn keyed<'a>(out: &mut Vec<(String, &'a Value)>, prefix: &str, pairs: &'a [(Value, Value)]) {
    out.extend(
        pairs
            .iter()
            .map(|(k, v)| (format!("{prefix}{}: ", short(k)), v)),
    );
}

/// A dict key, briefly.
fn short(key: &Value) -> String {
    match key {
        Value::Str(s) => format!("{s:?}"),
        Value::Int(i) => i.to_string(),
        other => other.type_name().to_owned(),
    }
}

/// A float as JSON: the shortest decimal that reads back as the same
/// element of `dtype`; non-finite values as the strings `nan`, `inf`,
/// `-inf`.
fn float_json(f: f64, dtype: DType) -> Json {
    let text = dtype.shortest_decimal(f);
    match text.parse::<f64>() {
        Ok(shortest) if f.is_finite() => json!(shortest),
        _ => json!(text),
    }
}

/// An element of `dtype` as JSON, in the form `inspect --json` documents.
pub fn scalar_json(scalar: &Scalar, dtype: DType) -> Json {
    match *scalar {
        Scalar::Bool(b) => json!(b),
        Scalar::Int(i) => json!(i),
        Scalar::UInt(u) => json!(u),
        Scalar::Float(f) => float_json(f, dtype),
        Scalar::Complex(re, im) | Scalar::PackedFloat4(re, im) => {
            json!([float_json(re, dtype), float_json(im, dtype)])
        }
    }
}

/// An element of `dtype` as the text form shows it: floats at the dtype's
/// precision, complex numbers as Python writes them (`1.5-2j`).
fn scalar_text(scalar: &Scalar, dtype: DType) -> String {
    match *scalar {
        Scalar::Bool(b) => if b { "True" } else { "False" }.to_owned(),
        Scalar::Int(i) => i.to_string(),
        Scalar::UInt(u) => u.to_string(),
        Scalar::Float(f) => dtype.shortest_decimal(f),
        Scalar::Complex(re, im) | Scalar::PackedFloat4(re, im) => {
            let im_text = dtype.shortest_decimal(im.abs());
            let sign = if im.is_sign_negative() { '-' } else { '+' };
            format!("{}{sign}{im_text}j", dtype.shortest_decimal(re))
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
