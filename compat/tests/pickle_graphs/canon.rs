//! The canonical text form of a graph, in Rust and in Python.

use std::borrow::Cow;
use std::collections::HashMap;

use tensorshare_compat::pickle::{Construction, Node, NodeId, Object, Pickle};

use super::{minimal, negate};

/// The Python half of the canonical form: `canon(obj)` mirrors
/// [`canonical`].
pub const CANON_PY: &str = r#"
import argparse, collections, struct, types

def canon(root):
    ids = {}
    keep = []

    def scalar(o):
        t = type(o)
        if o is None:
            return 'N'
        if t is bool:
            return 'T' if o else 'F'
        if t is int:
            return 'i:' + ('-' if o < 0 else '') + format(abs(o), 'x')
        if t is float:
            return 'f:' + struct.pack('>d', o).hex()
        if t is str:
            return 's:' + o.encode('utf-8', 'surrogatepass').hex()
        if t is bytes:
            return 'b:' + o.hex()
        if isinstance(o, (type, types.FunctionType)):
            return 'g:%s.%s' % (o.__module__, o.__qualname__)
        return None

    def value(o):
        s = scalar(o)
        if s is not None:
            return s
        t = type(o)
        if t is tuple:
            return '(' + ','.join(value(x) for x in o) + ')'
        if t is frozenset:
            return 'fs{' + ','.join(sorted(value(x) for x in o)) + '}'
        raise TypeError('not a hashable value: %r' % t)

    def tracked(o, body):
        k = id(o)
        if k in ids:
            return '*%d' % ids[k]
        ids[k] = n = len(ids)
        keep.append(o)
        return '&%d' % n + body()

    def pairs(items):
        return ','.join(value(k) + ':' + ident(v) for k, v in items)

    def ident(o):
        s = scalar(o)
        if s is not None:
            return s
        t = type(o)
        if t is tuple:
            if not o:
                return '()'
            return tracked(o, lambda: '(' + ','.join(ident(x) for x in o) + ')')
        if t is frozenset:
            if not o:
                return 'fs{}'
            return tracked(o, lambda: value(o))
        if t is bytearray:
            return tracked(o, lambda: 'ba:' + o.hex())
        if t is list:
            return tracked(o, lambda: '[' + ','.join(ident(x) for x in o) + ']')
        if t is dict:
            return tracked(o, lambda: '{' + pairs(o.items()) + '}')
        if t is set:
            return tracked(o, lambda: 'set{' + ','.join(sorted(value(x) for x in o)) + '}')
        if t is collections.OrderedDict:
            return tracked(o, lambda: 'od{' + pairs(o.items()) + '}')
        if t is collections.deque:
            return tracked(o, lambda: 'dq[' + ','.join(ident(x) for x in o) + ']')
        if t is types.SimpleNamespace:
            return tracked(o, lambda: 'ns{' + pairs(vars(o).items()) + '}')
        if t is argparse.Namespace:
            return tracked(o, lambda: 'ans{' + pairs(vars(o).items()) + '}')
        raise TypeError('unexpected type %r' % t)

    return ident(root)
"#;

/// `i:` then the sign and lowercase hex magnitude, as Python's canon writes
/// ints.
fn int_text(twos: &[u8]) -> String {
    let twos = minimal(twos);
    let negative = twos.last().is_some_and(|&b| b & 0x80 != 0);
    let mut magnitude = twos.to_vec();
    if negative {
        magnitude.push(0xff);
        negate(&mut magnitude);
    }
    let hex: String = magnitude.iter().rev().map(|b| format!("{b:02x}")).collect();
    let hex = hex.trim_start_matches('0');
    let hex = if hex.is_empty() { "0" } else { hex };
    format!("i:{}{hex}", if negative { "-" } else { "" })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A node as Python would see it once loaded: the `__reduce__` forms the
/// encoder writes below protocols 4 and 5, and the names `fix_imports`
/// writes, are read back as what they build.
enum View<'p> {
    None,
    Bool(bool),
    Int(Cow<'p, [u8]>),
    Float(f64),
    Str(&'p str),
    Bytes(Cow<'p, [u8]>),
    ByteArray(Cow<'p, [u8]>),
    Tuple(&'p [NodeId]),
    List(&'p [NodeId]),
    Dict(&'p str, &'p [(NodeId, NodeId)]),
    Set(&'p [NodeId]),
    FrozenSet(&'p [NodeId]),
    Global(String),
    Deque(&'p [NodeId]),
    Namespace(&'p str, &'p [(NodeId, NodeId)]),
    Unknown(String),
}

fn python3_name(module: &str, name: &str) -> String {
    match (module, name) {
        ("__builtin__", "xrange") => "builtins.range".to_owned(),
        ("__builtin__", name) => format!("builtins.{name}"),
        (module, name) => format!("{module}.{name}"),
    }
}

/// The canonical form of the arena's root; see the module docs.
pub fn canonical(pickle: &Pickle) -> String {
    Canon {
        pickle,
        ids: HashMap::new(),
    }
    .ident(pickle.root().expect("a decoded pickle has a root"))
}

struct Canon<'p> {
    pickle: &'p Pickle,
    ids: HashMap<NodeId, usize>,
}

impl<'p> Canon<'p> {
    fn global_name(&self, id: NodeId) -> Option<String> {
        match self.view(id) {
            View::Global(name) => Some(name),
            _ => None,
        }
    }

    fn view(&self, id: NodeId) -> View<'p> {
        match self.pickle.get(id).unwrap() {
            Node::None => View::None,
            Node::Bool(b) => View::Bool(*b),
            Node::Int(v) => View::Int(Cow::Owned(v.to_le_bytes().to_vec())),
            Node::BigInt(b) => View::Int(Cow::Borrowed(b)),
            Node::Float(f) => View::Float(*f),
            Node::Str(s) => View::Str(s),
            Node::Bytes(b) => View::Bytes(b.contiguous()),
            Node::ByteArray(b) => View::ByteArray(b.contiguous()),
            Node::Tuple(items) => View::Tuple(items),
            Node::List(items) => View::List(items),
            Node::Dict(pairs) => View::Dict("", pairs),
            Node::Set(items) => View::Set(items),
            Node::FrozenSet(items) => View::FrozenSet(items),
            Node::Global(g) => View::Global(python3_name(&g.module, &g.name)),
            Node::PersistentId(_) => View::Unknown("persistent id".into()),
            Node::Object(object) => self.view_object(object),
        }
    }

    fn view_object(&self, object: &'p Object) -> View<'p> {
        let unknown = || View::Unknown(format!("{object:?}"));
        let Some(callable) = self.global_name(object.callable) else {
            return unknown();
        };
        let (args, newobj) = match object.construction {
            Construction::Reduce { args } => (args, false),
            Construction::NewObj { args } => (args, true),
            Construction::NewObjEx { .. } => return unknown(),
        };
        let Node::Tuple(args) = self.pickle.get(args).unwrap() else {
            return unknown();
        };
        let state_pairs = || match object.state.map(|s| self.pickle.get(s).unwrap()) {
            Some(Node::Dict(pairs)) => Some(pairs.as_slice()),
            None => Some(&[][..]),
            Some(_) => None,
        };
        let arg = |i: usize| args.get(i).map(|&a| self.view(a));
        match (callable.as_str(), newobj, args.len()) {
            ("builtins.set" | "builtins.frozenset", false, 1) => match arg(0) {
                Some(View::List(items)) if callable == "builtins.set" => View::Set(items),
                Some(View::List(items)) => View::FrozenSet(items),
                _ => unknown(),
            },
            ("_codecs.encode", false, 2) => match (arg(0), arg(1)) {
                (Some(View::Str(text)), Some(View::Str("latin1"))) => {
                    View::Bytes(Cow::Owned(text.chars().map(|c| c as u8).collect()))
                }
                _ => unknown(),
            },
            ("builtins.bytes", false, 0) => View::Bytes(Cow::Borrowed(&[])),
            ("builtins.bytearray", false, 0) => View::ByteArray(Cow::Borrowed(&[])),
            ("builtins.bytearray", false, 1) => match arg(0) {
                Some(View::Bytes(bytes)) => View::ByteArray(bytes),
                _ => unknown(),
            },
            ("builtins.getattr", false, 2) => match (arg(0), arg(1)) {
                (Some(View::Global(parent)), Some(View::Str(name))) => {
                    View::Global(format!("{parent}.{name}"))
                }
                _ => unknown(),
            },
            ("collections.OrderedDict", false, 0) => View::Dict("od", &object.dict_items),
            ("collections.deque", false, 0) => View::Deque(&object.list_items),
            ("types.SimpleNamespace", false, 0) => match state_pairs() {
                Some(pairs) => View::Namespace("ns", pairs),
                None => unknown(),
            },
            ("argparse.Namespace", true, 0) => match state_pairs() {
                Some(pairs) => View::Namespace("ans", pairs),
                None => unknown(),
            },
            _ => unknown(),
        }
    }

    fn scalar(view: &View<'_>) -> Option<String> {
        Some(match view {
            View::None => "N".to_owned(),
            View::Bool(b) => if *b { "T" } else { "F" }.to_owned(),
            View::Int(twos) => int_text(twos),
            View::Float(f) => format!("f:{}", hex(&f.to_be_bytes())),
            View::Str(s) => format!("s:{}", hex(s.as_bytes())),
            View::Bytes(b) => format!("b:{}", hex(b)),
            View::Global(name) => format!("g:{name}"),
            View::Unknown(what) => format!("?{what}"),
            _ => return None,
        })
    }

    /// A hashable value, without identity marks.
    fn value(&self, id: NodeId) -> String {
        let view = self.view(id);
        if let Some(text) = Self::scalar(&view) {
            return text;
        }
        match view {
            View::Tuple(items) => {
                let items: Vec<String> = items.iter().map(|&i| self.value(i)).collect();
                format!("({})", items.join(","))
            }
            View::FrozenSet(items) => format!("fs{{{}}}", self.sorted_values(items)),
            _ => format!("?unhashable node {}", id.index()),
        }
    }

    fn sorted_values(&self, items: &[NodeId]) -> String {
        let mut values: Vec<String> = items.iter().map(|&i| self.value(i)).collect();
        values.sort();
        values.join(",")
    }

    fn pairs(&mut self, pairs: &[(NodeId, NodeId)]) -> String {
        let pairs: Vec<String> = pairs
            .iter()
            .map(|&(k, v)| format!("{}:{}", self.value(k), self.ident(v)))
            .collect();
        pairs.join(",")
    }

    fn ident(&mut self, id: NodeId) -> String {
        let view = self.view(id);
        if let Some(text) = Self::scalar(&view) {
            return text;
        }
        match view {
            View::Tuple([]) => return "()".to_owned(),
            View::FrozenSet([]) => return "fs{}".to_owned(),
            _ => {}
        }
        if let Some(n) = self.ids.get(&id) {
            return format!("*{n}");
        }
        let n = self.ids.len();
        self.ids.insert(id, n);
        let body = match view {
            View::Tuple(items) => {
                let items: Vec<String> = items.iter().map(|&i| self.ident(i)).collect();
                format!("({})", items.join(","))
            }
            View::FrozenSet(_) => self.value(id),
            View::ByteArray(b) => format!("ba:{}", hex(&b)),
            View::List(items) => {
                let items: Vec<String> = items.iter().map(|&i| self.ident(i)).collect();
                format!("[{}]", items.join(","))
            }
            View::Deque(items) => {
                let items: Vec<String> = items.iter().map(|&i| self.ident(i)).collect();
                format!("dq[{}]", items.join(","))
            }
            View::Dict(kind, pairs) => format!("{kind}{{{}}}", self.pairs(pairs)),
            View::Set(items) => format!("set{{{}}}", self.sorted_values(items)),
            View::Namespace(kind, pairs) => format!("{kind}{{{}}}", self.pairs(pairs)),
            _ => unreachable!("scalars returned above"),
        };
        format!("&{n}{body}")
    }
}
