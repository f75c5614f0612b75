//! Comparisons of a graph with its decoded copy and with what CPython
//! would write.

use std::collections::{HashMap, HashSet};

use tensorshare_compat::pickle::{Construction, Node, NodeId, Object, Pickle};

use super::minimal;

/// Whether CPython, pickling what `pickle.loads` returns for this graph,
/// writes the very bytes the encoder wrote.
///
/// It does unless set order differs (Python iterates sets in hash order) or
/// two of our objects become one in Python: CPython keeps one object per
/// empty or one-character (Latin-1) `str` and per empty or one-byte `bytes`,
/// including the temporary ones the encoder writes for `bytes` in protocol
/// 2 and for `bytearray` below protocol 5.
pub fn cpython_would_write_the_same(pickle: &Pickle, protocol: u8) -> bool {
    #[derive(PartialEq, Eq, Hash)]
    enum Singleton {
        Str(char),
        EmptyStr,
        Byte(u8),
        EmptyBytes,
    }
    let mut from_nodes: HashMap<Singleton, usize> = HashMap::new();
    let mut from_temporaries: HashSet<Singleton> = HashSet::new();
    for (_, node) in pickle.iter() {
        match node {
            Node::Set(items) | Node::FrozenSet(items) if items.len() > 1 => return false,
            Node::Str(s) => {
                let mut chars = s.chars();
                match (chars.next(), chars.next()) {
                    (None, _) => *from_nodes.entry(Singleton::EmptyStr).or_default() += 1,
                    (Some(c), None) if u32::from(c) < 0x100 => {
                        *from_nodes.entry(Singleton::Str(c)).or_default() += 1;
                    }
                    _ => {}
                }
            }
            Node::Bytes(b) => {
                match &*b.contiguous() {
                    [] => *from_nodes.entry(Singleton::EmptyBytes).or_default() += 1,
                    [byte] => *from_nodes.entry(Singleton::Byte(*byte)).or_default() += 1,
                    _ => {}
                }
                if let ([byte], 2) = (&*b.contiguous(), protocol) {
                    from_temporaries.insert(Singleton::Str(char::from(*byte)));
                }
            }
            Node::ByteArray(b) => {
                if let ([byte], 2..=4) = (&*b.contiguous(), protocol) {
                    from_temporaries.insert(Singleton::Byte(*byte));
                    if protocol == 2 {
                        from_temporaries.insert(Singleton::Str(char::from(*byte)));
                    }
                }
            }
            _ => {}
        }
    }
    if !from_nodes
        .iter()
        .all(|(key, &count)| count == 1 && !from_temporaries.contains(key))
    {
        return false;
    }
    // `BUILD` interns the keys of an instance `__dict__`, making equal keys
    // one object, and one with an interned global name in protocol 4.
    let mut interned: HashSet<&str> = HashSet::new();
    let mut attribute_keys = Vec::new();
    for (_, node) in pickle.iter() {
        match node {
            Node::Global(g) if protocol >= 4 => {
                interned.insert(&g.module);
                interned.insert(&g.name);
            }
            Node::Object(object) => {
                let state = object.state.and_then(|state| pickle.get(state));
                if let Some(Node::Dict(pairs)) = state {
                    for &(key, _) in pairs {
                        if let Node::Str(key) = pickle.get(key).unwrap() {
                            attribute_keys.push(key.as_str());
                        }
                    }
                }
            }
            _ => {}
        }
    }
    attribute_keys.into_iter().all(|key| interned.insert(key))
}

/// Checks that `decoded` is `original` node for node: the same values, the
/// same sharing, the same cycles.
///
/// Several original nodes may become one decoded node only where that is
/// the point: equal globals (one class), and `None`, booleans and `()`,
/// which the decoder keeps once as CPython does. Atoms the encoder never
/// memoizes (numbers, persistent ids) may become several.
pub fn same_graph(original: &Pickle, decoded: &Pickle) -> Result<(), String> {
    let mut forward: HashMap<NodeId, NodeId> = HashMap::new();
    let mut backward: HashMap<NodeId, NodeId> = HashMap::new();
    let (Some(a), Some(b)) = (original.root(), decoded.root()) else {
        return Err(format!(
            "roots differ: {:?} and {:?}",
            original.root(),
            decoded.root()
        ));
    };
    let mut pending = vec![(a, b)];
    while let Some((a, b)) = pending.pop() {
        let (na, nb) = (original.get(a).unwrap(), decoded.get(b).unwrap());
        let differ = || {
            format!(
                "node {} {na:?} was decoded as node {} {nb:?}",
                a.index(),
                b.index()
            )
        };
        let unmemoized = matches!(
            na,
            Node::Int(_) | Node::BigInt(_) | Node::Float(_) | Node::PersistentId(_)
        );
        let one_per_value = matches!(na, Node::None | Node::Bool(_) | Node::Global(_))
            || matches!(na, Node::Tuple(items) if items.is_empty());
        if !unmemoized {
            match forward.get(&a) {
                Some(&seen) if seen == b => continue,
                Some(&seen) => {
                    return Err(format!(
                        "node {} was decoded twice, as {} and {}",
                        a.index(),
                        seen.index(),
                        b.index()
                    ));
                }
                None => {}
            }
            if let Some(&other) = backward.get(&b)
                && !one_per_value
            {
                return Err(format!(
                    "nodes {} and {} were decoded as one node {}",
                    other.index(),
                    a.index(),
                    b.index()
                ));
            }
            forward.insert(a, b);
            backward.insert(b, a);
        }
        let mut pair = |xs: &[NodeId], ys: &[NodeId]| -> Result<(), String> {
            if xs.len() != ys.len() {
                return Err(differ());
            }
            pending.extend(xs.iter().copied().zip(ys.iter().copied()));
            Ok(())
        };
        let int = |node: &Node| match node {
            Node::Int(v) => Some(minimal(&v.to_le_bytes()).to_vec()),
            Node::BigInt(b) => Some(minimal(b).to_vec()),
            _ => None,
        };
        match (na, nb) {
            (Node::None, Node::None) => {}
            (Node::Bool(x), Node::Bool(y)) if x == y => {}
            (Node::Int(_) | Node::BigInt(_), _) if int(na).is_some() && int(na) == int(nb) => {}
            (Node::Float(x), Node::Float(y)) if x.to_bits() == y.to_bits() => {}
            (Node::Str(x), Node::Str(y)) if x == y => {}
            (Node::Bytes(x), Node::Bytes(y)) if x == y => {}
            (Node::ByteArray(x), Node::ByteArray(y)) if x == y => {}
            (Node::Global(x), Node::Global(y)) if x == y => {}
            (Node::Tuple(_), Node::Tuple(_))
            | (Node::List(_), Node::List(_))
            | (Node::Set(_), Node::Set(_))
            | (Node::FrozenSet(_), Node::FrozenSet(_))
            | (Node::Dict(_), Node::Dict(_))
            | (Node::PersistentId(_), Node::PersistentId(_)) => {
                pair(
                    &na.children().collect::<Vec<_>>(),
                    &nb.children().collect::<Vec<_>>(),
                )?;
            }
            (Node::Object(x), Node::Object(y)) => {
                // Equal shapes make the children line up one to one.
                let shape = |o: &Object| {
                    (
                        std::mem::discriminant(&o.construction),
                        o.state.is_some(),
                        o.list_items.len(),
                        o.dict_items.len(),
                    )
                };
                if shape(x) != shape(y) {
                    return Err(differ());
                }
                pair(
                    &na.children().collect::<Vec<_>>(),
                    &nb.children().collect::<Vec<_>>(),
                )?;
            }
            _ => return Err(differ()),
        }
    }
    Ok(())
}
