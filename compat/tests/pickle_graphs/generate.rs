//! Random graphs from a recipe of steps.

use std::collections::{BTreeSet, HashSet};

use proptest::prelude::*;
use tensorshare_compat::pickle::{Construction, Global, Node, NodeId, Object, Pickle};

use super::{minimal, negate};

/// Globals the generator may use: importable, plain, and named the same way
/// by CPython when it pickles them again.
const GLOBALS: &[(&str, &str)] = &[
    ("builtins", "set"),
    ("builtins", "range"),
    ("builtins", "frozenset"),
    ("collections", "OrderedDict"),
    ("json.decoder", "JSONDecoder.decode"),
];

/// One step of building a graph; indices pick earlier values modulo their
/// count, so every list of steps builds a valid graph.
#[derive(Clone, Debug)]
pub enum Step {
    None,
    Bool(bool),
    Int(i64),
    BigInt(Vec<u8>),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    ByteArray(Vec<u8>),
    Tuple(Vec<usize>),
    List(Vec<usize>),
    Dict(Vec<(usize, usize)>),
    Set(Vec<usize>),
    FrozenSet(Vec<usize>),
    Global(usize),
    OrderedDict(Vec<(usize, usize)>),
    Deque(Vec<usize>),
    SimpleNamespace(Vec<(String, usize)>),
    ArgparseNamespace(Vec<(String, usize)>),
    /// Appends value `.1` to list `.0`: may close a cycle.
    AppendToList(usize, usize),
}

fn int_strategy() -> impl Strategy<Value = i64> {
    prop_oneof![
        -300i64..300,
        any::<i64>(),
        prop::sample::select(vec![
            255,
            256,
            65535,
            65536,
            i64::from(i32::MAX),
            i64::from(i32::MIN),
            i64::from(i32::MAX) + 1,
            i64::from(i32::MIN) - 1,
            i64::MAX,
            i64::MIN,
        ]),
    ]
}

fn str_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-c]{0,3}",
        4 => prop::collection::vec(any::<char>(), 0..10).prop_map(String::from_iter),
        1 => "[a-z]{250,300}",
    ]
}

fn bytes_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::collection::vec(any::<u8>(), 0..10),
        1 => prop::collection::vec(any::<u8>(), 250..300),
    ]
}

fn indices() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(any::<usize>(), 0..6)
}

fn index_pairs() -> impl Strategy<Value = Vec<(usize, usize)>> {
    prop::collection::vec((any::<usize>(), any::<usize>()), 0..5)
}

fn attributes() -> impl Strategy<Value = Vec<(String, usize)>> {
    prop::collection::vec(("[a-z]{1,3}", any::<usize>()), 0..4)
}

/// A recipe for a random graph.
pub fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        1 => Just(Step::None),
        1 => any::<bool>().prop_map(Step::Bool),
        3 => int_strategy().prop_map(Step::Int),
        1 => prop::collection::vec(any::<u8>(), 0..20).prop_map(Step::BigInt),
        2 => prop_oneof![any::<f64>(), prop::sample::select(vec![0.0, -0.0, 0.5, 2.0])]
            .prop_map(Step::Float),
        4 => str_strategy().prop_map(Step::Str),
        2 => bytes_strategy().prop_map(Step::Bytes),
        1 => bytes_strategy().prop_map(Step::ByteArray),
        3 => indices().prop_map(Step::Tuple),
        3 => indices().prop_map(Step::List),
        2 => index_pairs().prop_map(Step::Dict),
        2 => indices().prop_map(Step::Set),
        1 => indices().prop_map(Step::FrozenSet),
        1 => (0..GLOBALS.len()).prop_map(Step::Global),
        1 => index_pairs().prop_map(Step::OrderedDict),
        1 => indices().prop_map(Step::Deque),
        1 => attributes().prop_map(Step::SimpleNamespace),
        1 => attributes().prop_map(Step::ArgparseNamespace),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(l, v)| Step::AppendToList(l, v)),
    ];
    prop::collection::vec(step, 1..30)
}

/// What Python's `==` and `hash` see of a hashable value: equal keys are
/// one dict key or one set element (`1`, `1.0` and `True` are one).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PyKey {
    None,
    /// Minimal little-endian two's complement.
    Int(Vec<u8>),
    /// A float that is not an integer.
    Float(u64),
    /// NaN equals nothing, so only itself (same object).
    Nan(NodeId),
    Str(String),
    Bytes(Vec<u8>),
    Tuple(Vec<PyKey>),
    FrozenSet(BTreeSet<PyKey>),
    Global(&'static str, &'static str),
}

/// Builds the arena a recipe describes; the root is a list of every value
/// nothing else holds.
pub fn build(steps: &[Step]) -> Pickle {
    let mut b = Builder::default();
    for step in steps {
        b.step(step);
    }
    let roots: Vec<NodeId> = b
        .values
        .iter()
        .zip(&b.referenced)
        .filter(|&(_, &referenced)| !referenced)
        .map(|(&(id, _), _)| id)
        .collect();
    let root = b.pickle.push(Node::List(roots));
    b.pickle.set_root(root);
    b.pickle
}

#[derive(Default)]
struct Builder {
    pickle: Pickle,
    /// Each value with its key when hashable.
    values: Vec<(NodeId, Option<PyKey>)>,
    referenced: Vec<bool>,
    lists: Vec<NodeId>,
}

impl Builder {
    fn add(&mut self, node: Node, key: Option<PyKey>) -> NodeId {
        let id = self.pickle.push(node);
        self.values.push((id, key));
        self.referenced.push(false);
        id
    }

    /// Any earlier value, marked as held.
    fn pick(&mut self, index: usize) -> Option<(NodeId, Option<PyKey>)> {
        let i = index.checked_rem(self.values.len())?;
        self.referenced[i] = true;
        Some(self.values[i].clone())
    }

    /// Distinct hashable earlier values, marked as held.
    fn pick_keys(&mut self, indices: impl IntoIterator<Item = usize>) -> Vec<(NodeId, PyKey)> {
        let hashable: Vec<usize> = (0..self.values.len())
            .filter(|&i| self.values[i].1.is_some())
            .collect();
        let mut seen = HashSet::new();
        let mut picked = Vec::new();
        for index in indices {
            let Some(slot) = index.checked_rem(hashable.len()) else {
                break;
            };
            let i = hashable[slot];
            let (id, key) = self.values[i].clone();
            let key = key.expect("filtered to hashable values");
            if seen.insert(key.clone()) {
                self.referenced[i] = true;
                picked.push((id, key));
            }
        }
        picked
    }

    fn pick_pairs(&mut self, pairs: &[(usize, usize)]) -> Vec<(NodeId, NodeId)> {
        let keys = self.pick_keys(pairs.iter().map(|&(k, _)| k));
        keys.into_iter()
            .zip(pairs)
            .filter_map(|((key, _), &(_, v))| Some((key, self.pick(v)?.0)))
            .collect()
    }

    fn global(&mut self, module: &str, name: &str) -> NodeId {
        self.pickle.push(Node::Global(Global::copied(module, name)))
    }

    fn object(&mut self, module: &str, name: &str, newobj: bool) -> Object {
        let callable = self.global(module, name);
        let args = self.pickle.push(Node::Tuple(Vec::new()));
        let construction = if newobj {
            Construction::NewObj { args }
        } else {
            Construction::Reduce { args }
        };
        Object {
            callable,
            construction,
            state: None,
            list_items: vec![],
            dict_items: vec![],
        }
    }

    fn attributes(&mut self, attributes: &[(String, usize)]) -> Vec<(NodeId, NodeId)> {
        let mut seen = HashSet::new();
        let mut pairs = Vec::new();
        for (name, index) in attributes {
            if seen.insert(name)
                && let Some((value, _)) = self.pick(*index)
            {
                let key = self.pickle.push(Node::Str(name.clone()));
                pairs.push((key, value));
            }
        }
        pairs
    }

    fn step(&mut self, step: &Step) {
        match step {
            Step::None => {
                self.add(Node::None, Some(PyKey::None));
            }
            Step::Bool(b) => {
                self.add(
                    Node::Bool(*b),
                    Some(PyKey::Int(minimal(&[u8::from(*b)]).to_vec())),
                );
            }
            Step::Int(v) => {
                self.add(
                    Node::Int(*v),
                    Some(PyKey::Int(minimal(&v.to_le_bytes()).to_vec())),
                );
            }
            Step::BigInt(bytes) => {
                let key = PyKey::Int(minimal(bytes).to_vec());
                self.add(Node::BigInt(bytes.clone()), Some(key));
            }
            Step::Float(f) => {
                let id = self.add(Node::Float(*f), None);
                let key = if f.is_nan() {
                    PyKey::Nan(id)
                } else if f.is_finite() && f.fract() == 0.0 {
                    PyKey::Int(int_of_float(*f))
                } else {
                    PyKey::Float(f.to_bits())
                };
                self.values.last_mut().expect("just added").1 = Some(key);
            }
            Step::Str(s) => {
                self.add(Node::Str(s.clone()), Some(PyKey::Str(s.clone())));
            }
            Step::Bytes(b) => {
                self.add(Node::Bytes(b.clone().into()), Some(PyKey::Bytes(b.clone())));
            }
            Step::ByteArray(b) => {
                self.add(Node::ByteArray(b.clone().into()), None);
            }
            Step::Tuple(indices) => {
                let picked: Vec<_> = indices.iter().filter_map(|&i| self.pick(i)).collect();
                let key = picked
                    .iter()
                    .map(|(_, key)| key.clone())
                    .collect::<Option<Vec<_>>>()
                    .map(PyKey::Tuple);
                self.add(
                    Node::Tuple(picked.into_iter().map(|(id, _)| id).collect()),
                    key,
                );
            }
            Step::List(indices) => {
                let items = indices
                    .iter()
                    .filter_map(|&i| self.pick(i).map(|p| p.0))
                    .collect();
                let id = self.add(Node::List(items), None);
                self.lists.push(id);
            }
            Step::Dict(pairs) => {
                let pairs = self.pick_pairs(pairs);
                self.add(Node::Dict(pairs), None);
            }
            Step::Set(indices) => {
                let items = self.pick_keys(indices.iter().copied());
                self.add(
                    Node::Set(items.into_iter().map(|(id, _)| id).collect()),
                    None,
                );
            }
            Step::FrozenSet(indices) => {
                let items = self.pick_keys(indices.iter().copied());
                let key = PyKey::FrozenSet(items.iter().map(|(_, key)| key.clone()).collect());
                let node = Node::FrozenSet(items.into_iter().map(|(id, _)| id).collect());
                self.add(node, Some(key));
            }
            Step::Global(i) => {
                let (module, name) = GLOBALS[i % GLOBALS.len()];
                self.add(
                    Node::Global(Global::new(module, name)),
                    Some(PyKey::Global(module, name)),
                );
            }
            Step::OrderedDict(pairs) => {
                let mut object = self.object("collections", "OrderedDict", false);
                object.dict_items = self.pick_pairs(pairs);
                self.add(Node::Object(Box::new(object)), None);
            }
            Step::Deque(indices) => {
                let mut object = self.object("collections", "deque", false);
                object.list_items = indices
                    .iter()
                    .filter_map(|&i| self.pick(i).map(|p| p.0))
                    .collect();
                self.add(Node::Object(Box::new(object)), None);
            }
            Step::SimpleNamespace(attributes) => {
                // SimpleNamespace.__reduce__ always returns the state dict.
                let mut object = self.object("types", "SimpleNamespace", false);
                let pairs = self.attributes(attributes);
                object.state = Some(self.pickle.push(Node::Dict(pairs)));
                self.add(Node::Object(Box::new(object)), None);
            }
            Step::ArgparseNamespace(attributes) => {
                // copyreg's reduction leaves out an empty `__dict__`.
                let mut object = self.object("argparse", "Namespace", true);
                let pairs = self.attributes(attributes);
                if !pairs.is_empty() {
                    object.state = Some(self.pickle.push(Node::Dict(pairs)));
                }
                self.add(Node::Object(Box::new(object)), None);
            }
            Step::AppendToList(list, value) => {
                let Some(list) = list.checked_rem(self.lists.len()).map(|i| self.lists[i]) else {
                    return;
                };
                // Not marked as held: the value may be the only path to the
                // list, so it stays a root.
                let Some(value) = value
                    .checked_rem(self.values.len())
                    .map(|i| self.values[i].0)
                else {
                    return;
                };
                if let Node::List(items) = self.pickle.get_mut(list).unwrap() {
                    items.push(value);
                }
            }
        }
    }
}

/// The exact integer value of an integral finite float, as minimal two's
/// complement.
fn int_of_float(f: f64) -> Vec<u8> {
    let bits = f.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    let mut mantissa = bits & ((1 << 52) - 1);
    if exponent != 0 {
        mantissa |= 1 << 52;
    }
    // value = mantissa * 2^(exponent - 1075)
    let shift = exponent.max(1) - 1075;
    let mut magnitude: Vec<u8> = if shift >= 0 {
        let mut out = vec![0u8; shift as usize / 8];
        let wide = u128::from(mantissa) << (shift % 8);
        out.extend_from_slice(&wide.to_le_bytes()[..9]);
        out
    } else {
        (mantissa >> (-shift).min(63)).to_le_bytes().to_vec()
    };
    magnitude.push(0);
    if f < 0.0 {
        negate(&mut magnitude);
    }
    minimal(&magnitude).to_vec()
}
